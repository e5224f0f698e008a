package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/cairnhq/cairn/pkg/faults"
	"github.com/cairnhq/cairn/pkg/saga"
)

// Effect is one outside write of a step, as its saga records describe it.
type Effect struct {
	Key string // the idempotency key the outside system enforces
	// Attrs are the effect's attributes an undo's scope selects by (saga.Record.Attrs).
	Attrs   map[string]string
	Payload any // what is written, recorded with the intent
	// Digest is what the key stands for, compared with an earlier attempt's intent; "" when
	// the outside system compares payloads itself.
	Digest  string
	Reverse *saga.Reverse // how an undo reverses it; nil for a write that is not reversed
}

// Keyed makes a step's outside writes, effs in order, each through write(i), firing the
// write faults around each (faults.BeforeWrite, LostReply, AfterWrite, numbered from 1).
// Every write's intent is on CAIRN_SAGA before it is made and its outcome after, with the
// receipt write returns (nil: none). A write whose key an earlier attempt meant to write
// with another digest is refused before it is made (idempotency.ErrConflict, naming both
// digests): the run is handed over. Each write is retried in the attempt (Attempt.Retry).
func (a *Attempt) Keyed(ctx context.Context, effs []Effect, write func(ctx context.Context, i int) (*saga.Receipt, error)) error {
	var prior saga.Intents
	if slices.ContainsFunc(effs, func(e Effect) bool { return e.Digest != "" }) {
		var err error
		if prior, err = a.Intents(ctx); err != nil {
			return err
		}
	}
	for i, e := range effs {
		n := i + 1
		if err := a.Fault(ctx, faults.BeforeWrite, n); err != nil {
			return err
		}
		intent := a.sagaRecord(e, saga.Intent)
		if err := prior.Refuses(intent); err != nil {
			return fmt.Errorf("writing %s: %w", e.Key, err)
		}
		if err := a.RecordEffect(ctx, intent); err != nil {
			return Temporary(err)
		}
		var receipt *saga.Receipt
		err := a.Retry(ctx, func(try int) error {
			rc, err := write(ctx, i)
			if err != nil {
				return err
			}
			receipt = rc
			return a.Fault(ctx, faults.LostReply, n)
		})
		if err != nil {
			return fmt.Errorf("writing %s: %w", e.Key, err)
		}
		outcome := a.sagaRecord(e, saga.Outcome)
		if receipt != nil {
			if outcome, err = saga.WithReceipt(intent, *receipt); err != nil {
				return err
			}
		}
		if err := a.RecordEffect(ctx, outcome); err != nil {
			return Temporary(err)
		}
		if err := a.Fault(ctx, faults.AfterWrite, n); err != nil {
			return err
		}
	}
	return nil
}

func (a *Attempt) sagaRecord(e Effect, phase string) saga.Record {
	r := saga.Record{Key: e.Key, RunID: a.RunID, Step: a.Step, Generation: a.Generation, Token: a.Token.Value,
		Phase: phase, Reverse: e.Reverse, Attrs: e.Attrs}
	if phase == saga.Intent {
		r.Payload, _ = json.Marshal(e.Payload)
		r.Digest = e.Digest
	} else {
		r.Outcome = "done"
		r.Reverse = nil
	}
	return r
}
