package saga

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/idempotency"
)

// Intents are the first intent recorded for each key of one step of a run: what an earlier
// attempt meant to write. A restart compares its writes with them (Refuses) before it makes
// them, so that a key is never written with a payload other than the one its first intent
// recorded: the outbox's deduplication cannot tell a restart's copy of a message (another
// token, another Msg-Id) from a message with another text.
type Intents map[string]Record

// ReadIntents reads the step's records of a run. A step with none (a first attempt) costs one
// request.
func ReadIntents(ctx context.Context, js jetstream.JetStream, runID, step string) (Intents, error) {
	evs, err := events.ReadSubject(ctx, js, assets.StreamSaga, events.SagaSubject(runID, step))
	if err != nil {
		return nil, err
	}
	out := Intents{}
	for _, e := range evs {
		var r Record
		if err := e.Unmarshal(&r); err != nil {
			return nil, fmt.Errorf("saga record %s: %w", e.ID, err)
		}
		if _, ok := out[r.Key]; !ok && r.Phase == Intent {
			out[r.Key] = r
		}
	}
	return out, nil
}

// Refuses is idempotency.ErrConflict, naming the key and both digests, when an earlier
// intent of r's key recorded another digest than r's; nil when there is none, when it
// recorded the same, or when either carries no digest (the outside system compares).
func (in Intents) Refuses(r Record) error {
	first, ok := in[r.Key]
	if !ok || first.Digest == "" || r.Digest == "" || first.Digest == r.Digest {
		return nil
	}
	return idempotency.Conflict(r.Key, first.Digest, r.Digest)
}
