package runner

import (
	"context"
	"errors"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/cairnhq/cairn/internal/handover"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// handoverPanic hands over the run whose step event made Handle panic, as a failed step is:
// the note first, then the record (status handed_over, the step failed with the panic, the
// lease released when it is this process's or none holds it). A record that cannot be
// trusted gets the note alone. An event whose run is not known yet (it panicked decoding)
// is rejected instead. consume.Recover then terms the event, so it does not come back.
func (r *Runner) handoverPanic(ctx context.Context, m *nats.Msg, seq uint64, runID string, cause error) {
	if runID == "" {
		r.reject(ctx, r.cfg.Space.Stream(assets.StreamSteps), seq, m, "", cause)
		return
	}
	step := r.cfg.StepName
	rec, _, err := r.cfg.Store.Load(ctx, runID)
	switch {
	case errors.Is(err, kc.ErrNotFound), errors.Is(err, kc.ErrNewerSchema):
		return
	case err != nil:
		r.noteOnly(ctx, runID, cause)
		return
	}
	note := r.note(rec, step, "panic", cause, nil)
	if err := handover.Put(ctx, r.cfg.Handovers, note); err != nil {
		r.log.Error("writing handover note", slog.String("run_id", runID), slog.Any("error", err))
	}
	_, rev, err := r.cfg.Store.Mutate(ctx, runID, func(n *kc.Record) error {
		if n.Status != kc.Running || (n.Lease != nil && n.Lease.Owner != r.owner.Name) {
			return kc.ErrSkip // stopped meanwhile, or another worker's now
		}
		n.Status = kc.HandedOver
		n.Lease = nil
		if n.Index(step) >= 0 {
			s := n.Step(step)
			s.Status = kc.Failed
			s.SetLastError(cause.Error())
		}
		handover.Name(n, note)
		return nil
	})
	if err != nil {
		if !errors.Is(err, kc.ErrSkip) {
			r.log.Error("recording a handover", slog.String("run_id", runID), slog.Any("error", err))
		}
		return
	}
	_ = r.audit.Record(ctx, events.AuditStepID(runID, step, "handover", rev), events.Audit{RunID: runID, Step: step, Event: "handover", Owner: r.owner.Name, Detail: cut(cause.Error(), 512)})
	r.notify(ctx, "handover", note, rec.Generation, 0)
	r.m.Handovers.WithLabelValues(step, "panic").Inc()
}
