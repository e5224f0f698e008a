package saga

import (
	"context"

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

// ReadIntents reads the step's records of a run, those trust accepts (all with a nil trust).
// A step with none (a first attempt) costs one request.
func ReadIntents(ctx context.Context, js jetstream.JetStream, sp assets.Space, trust *Trust, runID, step string) (Intents, error) {
	t, err := ReadTally(ctx, js, sp, trust, runID, step, 0)
	if err != nil {
		return nil, err
	}
	return t.First, nil
}

// Tally is what one step's records say so far: the first intent of each key (First, for
// Refuses, whatever its generation), and which keys of one generation have an intent without
// an outcome: writes begun and never confirmed (a crash between the write and its outcome,
// or a write that failed). A step keeps it up to date as it records (Add), so that it need
// not read its records again to count them.
type Tally struct {
	Generation int
	First      Intents
	// Forged are the records the read refused (Trust): not counted.
	Forged   []Forged
	intended map[string]struct{}
	done     map[string]struct{}
}

// NewTally is the tally of a step with no records yet, counting generation's intents.
func NewTally(generation int) *Tally {
	return &Tally{Generation: generation, First: Intents{}, intended: map[string]struct{}{}, done: map[string]struct{}{}}
}

// ReadTally reads the step's records of a run into a tally counting generation's intents:
// those trust accepts (all with a nil trust); the others are in Forged, not counted. A step
// with none costs one request.
func ReadTally(ctx context.Context, js jetstream.JetStream, sp assets.Space, trust *Trust, runID, step string, generation int) (*Tally, error) {
	evs, err := events.ReadStored(ctx, js, sp.Stream(assets.StreamSaga), sp.Saga(runID, step))
	if err != nil {
		return nil, err
	}
	t := NewTally(generation)
	for _, e := range evs {
		r, bad, err := trust.decode(ctx, sp, e)
		if err != nil {
			return nil, err
		}
		if bad != nil {
			t.Forged = append(t.Forged, *bad)
			continue
		}
		t.Add(r)
	}
	return t, nil
}

// Add counts one record, in the order the records were stored.
func (t *Tally) Add(r Record) {
	switch r.Phase {
	case Intent:
		if _, ok := t.First[r.Key]; !ok {
			t.First[r.Key] = r
		}
		if r.Generation == t.Generation {
			t.intended[r.Key] = struct{}{}
		}
	case Outcome:
		if r.Generation == t.Generation {
			t.done[r.Key] = struct{}{}
		}
	}
}

// Open is how many keys of the tally's generation have an intent and no outcome.
func (t *Tally) Open() int {
	n := 0
	for k := range t.intended {
		if _, ok := t.done[k]; !ok {
			n++
		}
	}
	return n
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
