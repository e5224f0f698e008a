package events

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/cairnhq/cairn/pkg/assets"
)

// FuzzDecode feeds Decode and DecodeCommand arbitrary headers ("key: value"
// lines, as in the golden files) and bodies. Neither may panic, and what
// they accept must survive Encode and decoding again unchanged.
func FuzzDecode(f *testing.F) {
	for _, e := range []struct {
		subject string
		event   Event
	}{
		{StepSubject("fetch", testRun), mustEvent(f, StepReadyID(testRun, "fetch", 3), TypeStepReady, testRun, StepReady{RunID: testRun, Step: "fetch"})},
		{RunStartSubject, mustEvent(f, "req-1", TypeRunStart, testRun, StartCommand{Params: nightInput()})},
		{AuditSubject(testRun), mustEvent(f, "a:1", TypeAudit, testRun, Audit{RunID: testRun, Event: "fenced", Attrs: map[string]string{"k": "v"}})},
	} {
		m, err := Encode(e.subject, e.event)
		if err != nil {
			f.Fatal(err)
		}
		w := wire(m)
		hdr, _, _ := bytes.Cut(w, []byte("\n\n"))
		f.Add(string(hdr), m.Data)
		f.Add(string(hdr), []byte(""))
		f.Add(string(hdr), []byte("{oops"))
		f.Add(string(bytes.ReplaceAll(hdr, []byte("1.0"), []byte("0.3"))), m.Data)
		f.Add(string(bytes.ReplaceAll(hdr, []byte(testRun), []byte("run.*"))), m.Data)
	}
	f.Add("", []byte(`{"specversion":"1.0","id":"x","type":"io.cairn.audit.recorded.v1","source":"/s","subject":"r","data":{"a":1}}`))
	f.Add("", []byte(`{"specversion":"1.0","id":"x","type":"io.cairn.audit.recorded.v1","source":"/s","subject":"r","data_base64":"e30="}`))
	f.Add("", []byte(`{"specversion":"1.0","id":"x","type":"io.cairn.audit.recorded.v1","source":"/s","subject":"r","time":"0000-01-01T00:00:00+01:00"}`))
	f.Add("", []byte(`{"run_id":"run-1","warehouse":"ldh","date":"2026-10-13"}`))
	f.Add("traceparent: 00-a-b-01", []byte(`{"request_id":"r-1"}`))
	f.Add("ce-specversion: 1.0\nce-type: x", []byte(""))
	f.Add("ce-specversion: 1.0\nce-id: 1\nce-type: io.cairn.run.cancel.v1\nce-source: %zz\nce-subject: r", []byte("{}"))

	f.Fuzz(func(t *testing.T, headers string, body []byte) {
		m := &nats.Msg{Subject: AuditSubject("r"), Header: parseHeaders(headers), Data: body}
		// The direct codec reads only what the sdk reads the same way (direct.go).
		if got, ok := decodeDirect(m, false); ok {
			if sdk, err := decodeSDK(m, false); err != nil || !reflect.DeepEqual(got, sdk) {
				t.Fatalf("decodeDirect read %+v from %q; the sdk %+v, %v", got, wire(m), sdk, err)
			}
		}
		if e, err := Decode(m); err == nil {
			again := reencode(t, m.Subject, e, Decode)
			sameEvent(t, again, e)
		}
		for _, subject := range []string{RunStartSubject, RunSubject("run-1", VerbApprove)} {
			m := &nats.Msg{Subject: subject, Header: parseHeaders(headers), Data: body}
			e, err := DecodeCommand(assets.Default, m, "seq-1")
			if err != nil {
				continue
			}
			again := reencode(t, subject, e, func(m *nats.Msg) (Event, error) { return DecodeCommand(assets.Default, m, "seq-2") })
			sameEvent(t, again, e)
		}
	})
}

func reencode(t *testing.T, subject string, e Event, decode func(*nats.Msg) (Event, error)) Event {
	t.Helper()
	m, err := Encode(subject, e)
	if err != nil {
		t.Fatalf("accepted %s but Encode refuses it: %v", show(e), err)
	}
	again, err := decode(m)
	if err != nil {
		t.Fatalf("accepted %s but not its encoding %q: %v", show(e), wire(m), err)
	}
	return again
}
