package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/idempotency"
)

// Digest is "sha256:<hex>" of what a message's key stands for: its kind, recipients,
// subject, body and the key it withdraws. Not who queued it or when (token, generation,
// queued_at), nor the sender's address: a restart's copy of the same message has the same
// digest, and a copy with another text under the same key has another.
func Digest(m Message) string {
	b, _ := json.Marshal(struct {
		Kind     string   `json:"kind"`
		To       []string `json:"to"`
		Subject  string   `json:"subject"`
		Body     string   `json:"body"`
		Reverses string   `json:"reverses"`
	}{m.Kind, m.To, m.Subject, m.Body, m.Reverses})
	return idempotency.Digest(b)
}

// checkStored compares m with the message the stream already holds at seq (the original
// of a duplicate publish): another payload under the same key is idempotency.ErrConflict.
func checkStored(ctx context.Context, js jetstream.JetStream, stream string, seq uint64, m Message) error {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("looking up stream %q: %w", stream, err)
	}
	raw, err := st.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil // gone by the stream's limits since: nothing left to compare with
	}
	if err != nil {
		return fmt.Errorf("reading the stored copy of %q at %d: %w", m.Key, seq, err)
	}
	e, err := events.Decode(&nats.Msg{Subject: raw.Subject, Header: raw.Header, Data: raw.Data})
	if err != nil {
		return fmt.Errorf("decoding the stored copy of %q: %w", m.Key, err)
	}
	var stored Message
	if err := e.Unmarshal(&stored); err != nil {
		return fmt.Errorf("decoding the stored copy of %q: %w", m.Key, err)
	}
	if have, want := Digest(stored), Digest(m); have != want || stored.Key != m.Key {
		return idempotency.Conflict(m.Key, have, want)
	}
	return nil
}
