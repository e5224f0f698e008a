package events_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
)

// Each limit of limits.go refuses a command one byte over it, plain or as a CloudEvent, with
// ErrTooLong (and ErrInvalid); one at the limit is decoded.
func TestDecodeCommandEnforcesTheLimits(t *testing.T) {
	long := func(n int) string { return strings.Repeat("x", n) }
	subject := events.RunSubject("r1", events.VerbApprove)
	cloud := func(id string, c events.Command) *nats.Msg {
		e, err := events.New(id, events.TypeRunApprove, "/test", "r1", time.Date(2026, 10, 13, 0, 0, 0, 0, time.UTC), c)
		if err != nil {
			t.Fatal(err)
		}
		m, err := events.Encode(subject, e)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, tc := range []struct {
		name string
		msg  *nats.Msg
		ok   bool
	}{
		{"request_id at the limit", &nats.Msg{Subject: subject, Data: []byte(`{"request_id":"` + long(events.MaxRequestID) + `"}`)}, true},
		{"request_id over", &nats.Msg{Subject: subject, Data: []byte(`{"request_id":"` + long(events.MaxRequestID+1) + `"}`)}, false},
		{"by at the limit", &nats.Msg{Subject: subject, Data: []byte(`{"by":"` + long(events.MaxName) + `"}`)}, true},
		{"by over", &nats.Msg{Subject: subject, Data: []byte(`{"by":"` + long(events.MaxName+1) + `"}`)}, false},
		{"ce-id over", cloud(long(events.MaxRequestID+1), events.Command{}), false},
		{"data's request_id over in a CloudEvent", cloud("ok-1", events.Command{RequestID: long(events.MaxRequestID + 1)}), false},
		{"by over in a CloudEvent", cloud("ok-2", events.Command{By: long(events.MaxName + 1)}), false},
		{"a CloudEvent within", cloud("ok-3", events.Command{By: "asha"}), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := events.DecodeCommand(assets.Default, tc.msg, "seq-1")
			if tc.ok {
				if err != nil {
					t.Fatalf("DecodeCommand: %v, want it decoded", err)
				}
				return
			}
			if !errors.Is(err, events.ErrTooLong) || !errors.Is(err, events.ErrInvalid) {
				t.Fatalf("DecodeCommand: %v, want ErrTooLong and ErrInvalid", err)
			}
		})
	}
}

// A rejection keeps at most MaxReason bytes of its reason.
func TestRejectedCutsItsReason(t *testing.T) {
	r := events.NewRejected("CAIRN_RUNS", 1, &nats.Msg{Subject: "cairn.runs.r1.resume"}, strings.Repeat("é", events.MaxReason))
	if len(r.Reason) > events.MaxReason || !strings.HasPrefix(strings.Repeat("é", events.MaxReason), r.Reason) || len(r.Reason) < events.MaxReason-2 {
		t.Fatalf("reason of %d bytes, want at most %d, cut on a character", len(r.Reason), events.MaxReason)
	}
}
