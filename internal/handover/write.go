package handover

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// Put writes n in the handovers bucket kv under its run, before the record that names it.
func Put(ctx context.Context, kv jetstream.KeyValue, n Note) error {
	b, err := json.Marshal(n)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, n.RunID, b); err != nil {
		return fmt.Errorf("writing handover note %q: %w", n.ID, err)
	}
	return nil
}

// Noted reports whether kv's note of runID is the note id already: a note written once
// (an untrusted record's, an undo's refused saga records) is not written, nor told, again.
// No note is false with no error.
func Noted(ctx context.Context, kv jetstream.KeyValue, runID, id string) (bool, error) {
	e, err := kv.Get(ctx, runID)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var old Note
	return json.Unmarshal(e.Value(), &old) == nil && old.ID == id, nil
}

// Name makes r name n: its handover and next action (the caller sets the status).
func Name(r *kc.Record, n Note) {
	id := n.ID
	r.Handover = &id
	r.NextAction = n.NextAction
}
