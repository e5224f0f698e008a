package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// Start asks the supervisor of pipeline name to start run runID on input, the pipeline's own
// members (its Definition.CheckInput validates them), on its space's start subject: a flat
// JSON object, as `nats pub cairn.enrich.runs.start '{"run_id":"r-1","source":"records.jsonl"}'`
// sends it to pipeline enrich. Publishing the same start twice starts one run.
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
	body, err := json.Marshal(events.StartCommand{RunID: runID, RequestID: "start-" + runID, Params: params})
	if err != nil {
		return fmt.Errorf("start %s: %w", runID, err)
	}
	m := nats.NewMsg(sp.RunStart())
	m.Data = body
	m.Header.Set(jetstream.MsgIDHeader, "start-"+runID)
	if _, err := js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("start %s: %w", runID, err)
	}
	return nil
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
// and returns its record, or ctx's error with the last record read.
func Wait(ctx context.Context, js jetstream.JetStream, name, runID string) (*kc.Record, error) {
	sp, err := assets.SpaceOf(name)
	if err != nil {
		return nil, err
	}
	store, err := kc.Open(ctx, js, sp.Bucket(assets.BucketRuns))
	if err != nil {
		return nil, err
	}
	var last *kc.Record
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		rec, _, err := store.Load(ctx, runID)
		switch {
		case err == nil:
			last = rec
			if Ended(rec.Status) {
				return rec, nil
			}
		case !errors.Is(err, kc.ErrNotFound):
			return last, err
		}
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("waiting for run %s to end: %w", runID, ctx.Err())
		case <-tick.C:
		}
	}
}
