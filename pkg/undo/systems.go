package undo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/handover"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/fence"
	"github.com/cairnhq/cairn/pkg/idempotency"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/outbox"
	"github.com/cairnhq/cairn/pkg/runner"
	"github.com/cairnhq/cairn/pkg/saga"
)

// EventUnregistered is the timeline event of an undo handed over because an effect it must
// reverse names a system with no System registered.
const EventUnregistered = "undo.unregistered"

// unregistered returns the effects of plan whose system has no System, in plan order.
func (c *Compensator) unregistered(plan []saga.Effect) []saga.Effect {
	var out []saga.Effect
	for _, e := range plan {
		if _, ok := c.cfg.Systems[e.Intent.Reverse.System]; !ok {
			out = append(out, e)
		}
	}
	return out
}

// handOver hands the run over to a person before the undo reverses anything more: an effect
// left to reverse (missing, in plan order) names a system the compensator cannot reverse.
// Skipping it would leave an outside write standing under a run that reads undone. The note
// (<run>:handover:undo:system) names the systems and the first keys; the record is handed
// over with the lease released and the cursor kept, and the command is settled: a new undo
// (another request) after the system is registered goes on from there.
func (c *Compensator) handOver(ctx context.Context, h *kc.Holder, missing []saga.Effect) error {
	cur, _ := h.Record()
	runID := cur.RunID
	systems := map[string]bool{}
	var keys []string
	for _, e := range missing {
		systems[e.Intent.Reverse.System] = true
		if len(keys) < maxNamed {
			keys = append(keys, e.Intent.Key)
		}
	}
	if len(missing) > maxNamed {
		keys = append(keys, "…")
	}
	names := slices.Sorted(maps.Keys(systems))
	note := handover.Note{
		ID: handover.ID(runID, Step, "system"), RunID: runID, Step: Step,
		Error: kc.CutText(fmt.Sprintf("undo of %s: %d effects name systems with no reversal registered: %s (keys %s); registered: %s",
			runID, len(missing), strings.Join(names, ", "), strings.Join(keys, ", "), strings.Join(slices.Sorted(maps.Keys(c.cfg.Systems)), ", ")), kc.MaxLastError),
		NextAction: fmt.Sprintf("a person decides: register the reversal of system %s (undo.Config.Systems) and undo %s again, or reverse those effects by hand", strings.Join(names, ", "), runID),
		At:         c.cfg.Now().UTC().Format(time.RFC3339Nano),
	}
	if err := c.handOverWith(ctx, h, note, EventUnregistered); err != nil {
		return err
	}
	c.log.Error("undo handed over: effects of unregistered systems", slog.String("run_id", runID), slog.Any("systems", names), slog.Int("effects", len(missing)))
	return nil
}

// EventRefused is the timeline event of an undo handed over because a system refused a
// reversal for good (its System's Reverse returned an error marked runner.Permanent, or
// idempotency.ErrConflict): no retry would change the answer.
const EventRefused = "undo.refused"

// refused reports whether err is a refusal no retry changes.
func refused(err error) bool {
	return errors.Is(err, runner.ErrPermanent) || errors.Is(err, idempotency.ErrConflict)
}

// handOverRefused hands the run over when the reversal of e, the n-th of the plan, was
// refused for good: the cursor stays before it, so an undo asked again after a person
// settled it goes on from there.
func (c *Compensator) handOverRefused(ctx context.Context, h *kc.Holder, e saga.Effect, n int, cause error) error {
	cur, _ := h.Record()
	runID := cur.RunID
	note := handover.Note{
		ID: handover.ID(runID, Step, "refused"), RunID: runID, Step: Step,
		Error: kc.CutText(fmt.Sprintf("undo of %s: system %s refused the reversal of %s (effect %d): %v",
			runID, e.Intent.Reverse.System, e.Intent.Key, n, cause), kc.MaxLastError),
		NextAction: fmt.Sprintf("a person decides: settle the reversal of %s in %s by hand, then undo %s again", e.Intent.Key, e.Intent.Reverse.System, runID),
		At:         c.cfg.Now().UTC().Format(time.RFC3339Nano),
	}
	if err := c.handOverWith(ctx, h, note, EventRefused); err != nil {
		return err
	}
	c.log.Error("undo handed over: a reversal refused", slog.String("run_id", runID), slog.String("key", e.Intent.Key), slog.Any("error", cause))
	return nil
}

// handOverWith writes note, hands the run over with the lease released and the cursor
// kept, and puts event on the timeline.
func (c *Compensator) handOverWith(ctx context.Context, h *kc.Holder, note handover.Note, event string) error {
	runID := note.RunID
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	c.putNote(wctx, note)
	if err := h.Release(wctx, func(r *kc.Record) error {
		r.Status = kc.HandedOver
		handover.Name(r, note)
		return nil
	}); err != nil {
		return c.stop(ctx, h, err)
	}
	c.record(ctx, runID, event, h.Token(), kc.CutText(note.Error, 512))
	return nil
}

// putNote writes a handover's note in the space's handovers bucket, before the record that
// names it.
func (c *Compensator) putNote(ctx context.Context, note handover.Note) {
	if c.cfg.Handovers == nil {
		return
	}
	if err := handover.Put(ctx, c.cfg.Handovers, note); err != nil {
		c.log.Error("writing handover note", slog.String("run_id", note.RunID), slog.Any("error", err))
	}
}

// Mail reverses the messages a run's steps queued through the outbox (system saga.Mail):
// one never handed to the sender is cancelled; one that may have gone is withdrawn, a
// message of its own queued under the withdrawal's key.
type Mail struct {
	JS    jetstream.JetStream
	Space assets.Space       // the pipeline's outbox
	Marks jetstream.KeyValue // the space's cairn-outbox-sent bucket
	Store *kc.Store          // signs the withdrawals (the compensator's)
	Now   func() time.Time
}

// RaiseFence is a no-op: the outbox admits a message by the run's record.
func (Mail) RaiseFence(context.Context, fence.Token, *kc.Record) error { return nil }

// Reverse cancels or withdraws the message of e.
func (m Mail) Reverse(ctx context.Context, t fence.Token, rec *kc.Record, e saga.Effect) (bool, error) {
	// Never handed to the sender: cancelled. Otherwise it may have gone: withdrawn.
	cancelled, err := outbox.Cancel(ctx, m.Marks, rec.RunID, e.Intent.Key)
	if err != nil || cancelled {
		return cancelled, err
	}
	var w outbox.Message
	if err := json.Unmarshal(e.Intent.Reverse.Payload, &w); err != nil {
		return false, err
	}
	mark, err := outbox.MarkOf(ctx, m.Marks, rec.RunID, w.Key)
	if err != nil {
		return false, err
	}
	if mark != "" {
		return false, nil // withdrawn already (an earlier undo)
	}
	now := time.Now
	if m.Now != nil {
		now = m.Now
	}
	// Queued under its key: a repeat before it is sent is dropped as a duplicate.
	w.Step, w.Generation, w.Token, w.QueuedAt = Step, rec.Generation, t.Value, now().UTC().Round(time.Second)
	return true, outbox.Queue(ctx, m.JS, w, outbox.SignedBy(m.Store.Signer()), outbox.In(m.Space))
}
