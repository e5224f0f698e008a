package events

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// when is the time of every test event; nanoseconds check RFC3339Nano.
var when = time.Date(2026, 10, 13, 22, 0, 3, 123456789, time.UTC)

const testRun = "run-2026-10-13-ldh"

// mustEvent builds an event or fails the test.
func mustEvent(t testing.TB, id, typ, runID string, data any) Event {
	t.Helper()
	e, err := New(id, typ, "/cairn/test", runID, when, data)
	if err != nil {
		t.Fatalf("New(%q, %q): %v", id, typ, err)
	}
	return e
}

// wire renders a message as sorted "key: value" header lines, a blank line
// and the body: the golden files' format, and the fuzzer's header format.
func wire(m *nats.Msg) []byte {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m.Header)) {
		for _, v := range m.Header[k] {
			b.WriteString(k + ": " + v + "\n")
		}
	}
	b.WriteString("\n")
	b.Write(m.Data)
	return []byte(b.String())
}

// parseHeaders reads wire's header lines back, skipping lines without a
// colon.
func parseHeaders(s string) nats.Header {
	h := nats.Header{}
	for line := range strings.Lines(s) {
		k, v, ok := strings.Cut(strings.TrimSuffix(line, "\n"), ": ")
		if !ok || k == "" {
			continue
		}
		h.Add(k, v)
	}
	return h
}

// sameEvent compares two events field by field, data by bytes.
func sameEvent(t testing.TB, got, want Event) {
	t.Helper()
	if got.ID != want.ID || got.Type != want.Type || got.Source != want.Source ||
		got.Subject != want.Subject || !got.Time.Equal(want.Time) ||
		got.Time.Location() != want.Time.Location() || got.TraceParent != want.TraceParent ||
		string(got.Data) != string(want.Data) {
		t.Fatalf("event differs\n got: %s\nwant: %s", show(got), show(want))
	}
}

func show(e Event) string {
	b, _ := json.Marshal(struct {
		Event
		Data string
	}{e, string(e.Data)})
	return string(b)
}
