package outbox_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/outbox"
)

// A restart's copy of a message (the same key under a higher token) is stored beside the dead
// attempt's, so the sender finds the copy of the attempt that committed.
func TestQueueRestartCopyIsStored(t *testing.T) {
	t.Parallel()
	f := setup(t)
	m := message("run-2026-10-13-ldh", "debit", "run-2026-10-13-ldh:debit:SUP-07")
	again := m
	again.Token = m.Token + 5
	f.queue(t, m, again, again)
	info, err := f.stream.Info(testContext(t))
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("stream holds %d messages, want the dead attempt's and the restart's", info.State.Msgs)
	}
}

func TestQueueTwiceSameKeyStoresOneMessage(t *testing.T) {
	t.Parallel()
	f := setup(t)
	m := message("run-2026-10-13-ldh", "debit", "run-2026-10-13-ldh:debit:SUP-07")

	f.queue(t, m, m)

	info, err := f.stream.Info(testContext(t))
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("stream holds %d messages, want 1", info.State.Msgs)
	}
	raw, err := f.stream.GetMsg(testContext(t), info.State.LastSeq)
	if err != nil {
		t.Fatalf("get message: %v", err)
	}
	if want := events.OutboxSubject(m.RunID, m.Kind); raw.Subject != want {
		t.Errorf("subject = %q, want %q", raw.Subject, want)
	}
	if got := raw.Header.Get(jetstream.MsgIDHeader); got != m.Key+":t1876" || got != outbox.EventID(m) {
		t.Errorf("Nats-Msg-Id = %q, want the key and the token, %q", got, outbox.EventID(m))
	}
	if got := raw.Header.Get("ce-type"); got != events.TypeOutbox {
		t.Errorf("ce-type = %q, want %q", got, events.TypeOutbox)
	}
	if got := raw.Header.Get("ce-source"); got != "/cairn/debit-notes" {
		t.Errorf("ce-source = %q, want /cairn/debit-notes", got)
	}
}

func TestQueueRefusesInvalidMessages(t *testing.T) {
	t.Parallel()
	f := setup(t)
	valid := message("run-1", "debit", "run-1:debit:SUP-07")
	tests := []struct {
		name   string
		change func(*outbox.Message)
		want   string
	}{
		{"no key", func(m *outbox.Message) { m.Key = "" }, "key is empty"},
		{"key with a space", func(m *outbox.Message) { m.Key = "run-1:debit SUP" }, "key holds a space"},
		{"run id with a dot", func(m *outbox.Message) { m.RunID = "run.1" }, "run_id"},
		{"kind with a star", func(m *outbox.Message) { m.Kind = "de*bit" }, "kind"},
		{"no recipient", func(m *outbox.Message) { m.To = nil }, "to names nobody"},
		{"bad recipient", func(m *outbox.Message) { m.To = []string{"not an address"} }, "is not an address"},
		{"subject with a line break", func(m *outbox.Message) { m.Subject = "a\r\nBcc: x@y.z" }, "line break"},
		{"no time", func(m *outbox.Message) { m.QueuedAt = time.Time{} }, "queued_at"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := valid
			m.To = append([]string(nil), valid.To...)
			tt.change(&m)
			err := outbox.Queue(testContext(t), f.js, m)
			if !errors.Is(err, outbox.ErrInvalid) {
				t.Fatalf("Queue err = %v, want ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Queue err = %q, want it to name %q", err, tt.want)
			}
		})
	}
	info, err := f.stream.Info(testContext(t))
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	if info.State.Msgs != 0 {
		t.Errorf("stream holds %d messages after refused queues, want 0", info.State.Msgs)
	}
}

// A webhook call has no sender: one queued without a From is valid (a step that only calls
// a webhook needs no mail address configured), while a mail without one, or a webhook call
// with a From that is no address, is refused.
func TestAWebhookCallNeedsNoFrom(t *testing.T) {
	call := message("run-1", "hook", "run-1:hook:1")
	call.From, call.To = "", []string{"https://hooks.example.com/cairn"}
	if err := call.Validate(); err != nil {
		t.Errorf("a webhook call without From: %v, want it valid", err)
	}
	call.From = "nobody"
	if err := call.Validate(); err == nil || !strings.Contains(err.Error(), `from "nobody" is not an address`) {
		t.Errorf("a webhook call from %q: %v, want it refused", call.From, err)
	}
	mail := message("run-1", "debit", "run-1:debit:SUP-07")
	mail.From = ""
	if err := mail.Validate(); err == nil || !strings.Contains(err.Error(), `from "" is not an address`) {
		t.Errorf("a mail without From: %v, want it refused", err)
	}
}
