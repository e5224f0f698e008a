package outbox_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/cairnhq/cairn/pkg/idempotency"
	"github.com/cairnhq/cairn/pkg/outbox"
)

// A message queued again under the same key and token with another body is refused, naming
// the key and both digests, and the stream keeps the first; the same body again is a
// harmless repeat.
func TestQueueSameKeyOtherBodyConflicts(t *testing.T) {
	t.Parallel()
	f := setup(t)
	m := message("run-2026-10-13-ldh", "debit", "run-2026-10-13-ldh:debit:SUP-07")
	f.queue(t, m)

	other := m
	other.Body = "Claim for run run-2026-10-13-ldh.\nTotal: 512.50\n"
	err := outbox.Queue(testContext(t), f.js, other)
	if !errors.Is(err, idempotency.ErrConflict) {
		t.Fatalf("Queue of another body = %v, want idempotency.ErrConflict", err)
	}
	var c *idempotency.ConflictError
	if !errors.As(err, &c) || c.Key != m.Key || c.Stored != outbox.Digest(m) || c.New != outbox.Digest(other) {
		t.Fatalf("conflict %+v, want key %s, stored %s, new %s", c, m.Key, outbox.Digest(m), outbox.Digest(other))
	}
	for _, want := range []string{m.Key, outbox.Digest(m), outbox.Digest(other)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not name %q", err, want)
		}
	}

	if err := outbox.Queue(testContext(t), f.js, m); err != nil {
		t.Fatalf("Queue of the same message again = %v, want nil", err)
	}
	later := m
	later.QueuedAt = m.QueuedAt.Add(1) // who queued it and when is not its payload
	later.Generation = 0
	if err := outbox.Queue(testContext(t), f.js, later); err != nil {
		t.Fatalf("Queue of the same message at another time = %v, want nil", err)
	}

	info, err := f.stream.Info(testContext(t))
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("stream holds %d messages, want the first only", info.State.Msgs)
	}
	msg := next(t, f.cons)
	if got := string(msg.Data()); !strings.Contains(got, "482.50") {
		t.Errorf("stored copy %s is not the first body", got)
	}
}

func TestDigestCoversWhatTheKeyStandsFor(t *testing.T) {
	t.Parallel()
	m := message("run-1", "debit", "run-1:debit:SUP-07")
	same := m
	same.Token, same.Generation, same.From, same.QueuedAt = 9, 1, "other@example.com", m.QueuedAt.Add(1)
	if outbox.Digest(same) != outbox.Digest(m) {
		t.Errorf("digest changed with the token, generation, sender or time")
	}
	for name, change := range map[string]func(*outbox.Message){
		"body":     func(m *outbox.Message) { m.Body += "x" },
		"subject":  func(m *outbox.Message) { m.Subject += "x" },
		"to":       func(m *outbox.Message) { m.To = []string{"other@supplier.example"} },
		"kind":     func(m *outbox.Message) { m.Kind = "report" },
		"reverses": func(m *outbox.Message) { m.Reverses = "run-1:debit:SUP-08" },
	} {
		o := m
		change(&o)
		if outbox.Digest(o) == outbox.Digest(m) {
			t.Errorf("digest did not change with the %s", name)
		}
	}
}
