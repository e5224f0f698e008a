package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// Start asks the supervisor of pipeline name to start run runID on input, the pipeline's own
// members (its Definition.CheckInput validates them), and waits for its answer (StartIn): nil
// once the run exists, a *Refused when the supervisor refuses the start (another run has
// this input already, naming it; the run exists with other input; the input is not the
// pipeline's), and an error wrapping ErrNoAnswer when ctx ends first, so give ctx a
// deadline. The start is the JSON object a plain `nats pub
// cairn.enrich.runs.start '{"run_id":"r-1","source":"records.jsonl"}'` sends to pipeline
// enrich, with a request id made of the run id and the input: the same start sent twice
// starts one run.
func Start(ctx context.Context, js jetstream.JetStream, name, runID string, input map[string]any) error {
	sp, err := assets.SpaceOf(name)
	if err != nil {
		return fmt.Errorf("start %s: %w", runID, err)
	}
	params := make(map[string]json.RawMessage, len(input))
	for k, v := range input {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("start %s: member %q: %w", runID, k, err)
		}
		params[k] = b
	}
	id, err := startID(runID, params)
	if err != nil {
		return fmt.Errorf("start %s: %w", runID, err)
	}
	_, err = StartIn(ctx, js, sp, "/cairn/app", events.StartCommand{RunID: runID, RequestID: id, Params: params})
	return err
}

// Command sends a command to pipeline name's run runID, as `cairn resume`, `cairn rerun
// --from`, `cairn cancel` and `cairn undo` do: verb is one of events.VerbResume, VerbRerun,
// VerbCancel, VerbUndo, VerbApprove, VerbReject, and c its arguments (From for a rerun,
// AfterFix for a resume, Scope for an undo). requestID names the command: sending it again
// with the same id does it once. It returns once the command's stream has it; the supervisor
// (or the compensator, for an undo) carries it out, and Wait follows the run.
func Command(ctx context.Context, js jetstream.JetStream, name, runID, verb, requestID string, c events.Command) error {
	sp, err := assets.SpaceOf(name)
	if err != nil {
		return fmt.Errorf("%s %s: %w", verb, runID, err)
	}
	typ, ok := events.CommandType(verb)
	if !ok || verb == events.VerbStart {
		return fmt.Errorf("%s %s: no such command (Start starts a run)", verb, runID)
	}
	if requestID == "" {
		return fmt.Errorf("%s %s: a command needs a request id, so that sending it twice does it once", verb, runID)
	}
	c.RequestID = requestID
	e, err := events.New(requestID, typ, "/cairn/app", runID, time.Now(), c)
	if err != nil {
		return err
	}
	m, err := events.Encode(sp.Run(runID, verb), e)
	if err != nil {
		return err
	}
	if _, err := js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("%s %s: %w", verb, runID, err)
	}
	return nil
}

// Ended reports whether a run's status is one it stays in until a person acts: done,
// handed over, undone or cancelled.
func Ended(s kc.Status) bool {
	return s == kc.Done || s == kc.HandedOver || s == kc.Undone || s == kc.Cancelled
}

// Wait reads the checkpoint of pipeline name's run runID until the run has ended (Ended)
// and returns its record, or ctx's error with the last record read. While the run has no
// record, Wait follows the refusals of its starts too: one refused (Start's *Refused) ends
// the wait with that *Refused, for no run will come of it.
func Wait(ctx context.Context, js jetstream.JetStream, name, runID string) (*kc.Record, error) {
	return waitUntil(ctx, js, name, runID, "to end", func(r *kc.Record) bool { return Ended(r.Status) })
}

// waitUntil is Wait until the run's record is one done says it waits for (what: the words
// of ctx's error).
func waitUntil(ctx context.Context, js jetstream.JetStream, name, runID, what string, done func(*kc.Record) bool) (*kc.Record, error) {
	sp, err := assets.SpaceOf(name)
	if err != nil {
		return nil, err
	}
	store, err := kc.Open(ctx, js, sp.Bucket(assets.BucketRuns))
	if err != nil {
		return nil, err
	}
	var (
		last     *kc.Record
		refusals <-chan refusal // while the run has no record
		stop     = func() {}
		refused  *refusal
	)
	defer func() { stop() }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		rec, _, err := store.Load(ctx, runID)
		switch {
		case err == nil:
			if refusals != nil { // the run exists: its refused starts are history
				stop()
				refusals, stop, refused = nil, func() {}, nil
			}
			last = rec
			if done(rec) {
				return rec, nil
			}
		case !errors.Is(err, kc.ErrNotFound):
			return last, err
		case refused != nil:
			holder := ""
			if refused.params != nil {
				holder = holderOf(ctx, js, sp, runID, *refused.params)
			}
			return nil, refused.refused(holder)
		case refusals == nil:
			st, err := js.Stream(ctx, sp.Stream(assets.StreamRejected))
			if err != nil {
				return nil, fmt.Errorf("waiting for run %s: the refusals' stream: %w", runID, err)
			}
			follow, end, err := followRefusals(ctx, js, sp, st, runID, 1, func(refusal) bool { return true })
			if err != nil {
				return nil, fmt.Errorf("waiting for run %s: %w", runID, err)
			}
			refusals, stop = follow, end
		}
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("waiting for run %s %s: %w", runID, what, ctx.Err())
		case r := <-refusals:
			refused = &r // read the record again at once: a later start may have made it
		case <-tick.C:
		}
	}
}
