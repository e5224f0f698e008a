package events

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current encoder")

// TestGolden pins the wire format: a change to a header name, the time
// format or the body shows up as a diff in review.
func TestGolden(t *testing.T) {
	t.Parallel()
	ready := mustEvent(t, StepReadyID(testRun, "fetch", 3), TypeStepReady, testRun,
		StepReady{RunID: testRun, Step: "fetch", Generation: 0})
	ready.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	start := mustEvent(t, "start-1", TypeRunStart, testRun,
		StartCommand{RequestID: "start-1", RunID: testRun, Params: nightInput()})
	cases := []struct {
		file    string
		subject string
		event   Event
	}{
		{"step_ready.golden", StepSubject("fetch", testRun), ready},
		{"start_command.golden", RunStartSubject, start},
	}
	for _, tc := range cases {
		m, err := Encode(tc.subject, tc.event)
		if err != nil {
			t.Fatalf("%s: Encode: %v", tc.file, err)
		}
		got := wire(m)
		path := filepath.Join("testdata", tc.file)
		if *update {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatalf("writing %s: %v", path, err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("reading %s (run with -update to create it): %v", path, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs\n got:\n%s\nwant:\n%s", path, got, want)
		}
		back, err := Decode(&nats.Msg{Subject: tc.subject, Header: parseHeaders(string(want)), Data: body(want)})
		if err != nil {
			t.Fatalf("%s: decoding the golden file: %v", tc.file, err)
		}
		sameEvent(t, back, tc.event)
	}
}

// body is what follows the blank line of a wire rendering.
func body(w []byte) []byte {
	_, b, _ := bytes.Cut(w, []byte("\n\n"))
	return b
}
