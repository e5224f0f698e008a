package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/handover"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// runLeaseFree runs a step that takes no lease: it commits with one compare-and-set on the
// revision it read; on a conflict it re-reads, and a verified step means another did it.
// size is rec's Size when the store knows it (kc.Store.LoadAt), else 0.
func (r *Runner) runLeaseFree(ctx context.Context, m jetstream.Msg, ready events.StepReady, rec *kc.Record, rev uint64, size int, redelivered bool) settleFunc {
	if kc.StepRoomSized(rec, r.cfg.StepName, size) < 0 {
		return r.noRoom(ctx, rec)
	}
	restart := redelivered && !failuresRecorded(m, rec.Step(r.cfg.StepName))
	a := r.newAttempt(rec, rev, restart)
	if redelivered {
		var gerr error
		rec, rev, gerr = r.guardLeaseFree(ctx, a, rec, rev)
		if errors.Is(gerr, kc.ErrSkip) {
			return ack
		}
		if gerr != nil {
			return r.failLeaseFree(ctx, a, gerr)
		}
		a.rec = rec
	}
	a.drift.continued = continues(ready, rev, redelivered)
	var res *Result
	var outs outputs
	err := r.checkDrift(ctx, a, rec)
	if err == nil {
		res, outs, err = r.runWithHeartbeat(ctx, m, a, nil)
	}
	if err == nil {
		outs, err = r.fitOutputs(ctx, a, rec, res, outs)
	}
	if err == nil {
		err = a.Fault(ctx, "before-commit", 0)
	}
	if err != nil {
		return r.failLeaseFree(ctx, a, err)
	}
	var change string
	committed, crev, err := r.cfg.Store.MutateFrom(ctx, rec, rev, a.RunID, func(n *kc.Record) error {
		if n.Step(a.Step).Status == kc.Verified || n.Generation != a.Generation {
			return kc.ErrSkip
		}
		if n.Lease != nil {
			// Another holds the run (an undo after a cancel): only the holder writes a
			// record it holds. The work is left undone; a resume runs the step again.
			a.log.Warn("commit left undone: the run's lease is held", slog.String("holder", n.Lease.Owner), slog.String("lease_step", n.Lease.Step))
			return kc.ErrSkip
		}
		if restart {
			n.Restarts++
			n.Step(a.Step).Attempts++
		}
		// An earlier attempt that failed recorded the versions it ran under: other ones now
		// are a version change, as a leased step's restart records it.
		s := n.Step(a.Step)
		if change = versionChange(s.Versions, r.versions()); change != "" {
			msg := versionChangeNote + change
			if s.LastError != nil {
				msg += "; before: " + *s.LastError
			}
			s.SetLastError(msg)
		}
		r.applyCommit(n, a, res, outs)
		return nil
	})
	if errors.Is(err, kc.ErrNewerSchema) {
		a.log.Warn("commit left to a newer release", slog.Any("error", err))
		return nakAfter(kc.NewerSchemaRetry)
	}
	if errors.Is(err, kc.ErrSkip) {
		return ack
	}
	if err != nil {
		return r.failLeaseFree(ctx, a, Temporary(err))
	}
	if change != "" {
		r.auditStep(a, "version.changed", a.Token.Value, change)
		a.log.Warn("the step ran again under other versions", slog.String("change", change))
	}
	return r.afterCommit(ctx, a, committed, crev)
}

// failuresRecorded reports whether every earlier delivery of m is counted in the step's
// attempts: each ended in a failure the record holds (failLeaseFree counts it), so this
// delivery is that failure's retry, not a restart. A delivery that recorded nothing (its
// process died, or it was put back for another reason) leaves one uncounted: this delivery
// restarts it, and its commit counts it.
func failuresRecorded(m jetstream.Msg, s *kc.Step) bool {
	meta, err := m.Metadata()
	if err != nil || meta.NumDelivered < 2 {
		return false
	}
	return uint64(s.Attempts) >= meta.NumDelivered-1
}

func (r *Runner) failLeaseFree(ctx context.Context, a *Attempt, err error) settleFunc {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	defer func() { _ = a.batch.Wait(wctx) }()
	c := classify(err)
	if c == classStopped {
		r.observe(a, "stopped")
		return nakAfter(time.Second)
	}
	// The note goes first, as for a leased step: a record that says handed_over always has
	// its note.
	handingOver := c != classTemporary || (r.guardsByAttempts() && a.rec.Step(a.Step).Attempts+1 >= r.cfg.LoopGuard)
	var note HandoverNote
	if handingOver {
		note = r.note(a.rec, a.Step, fmt.Sprintf("%d", a.Token.Value), err, r.stepProgress(wctx, a))
		if perr := handover.Put(wctx, r.cfg.Handovers, note); perr != nil {
			a.log.Error("writing handover note", slog.Any("error", perr))
			return nakAfter(time.Second)
		}
	}
	var attempts int
	open, counted := r.countIntents(wctx, a)
	_, _, werr := r.cfg.Store.Mutate(wctx, a.RunID, func(n *kc.Record) error {
		s := n.Step(a.Step)
		if s.Status == kc.Verified || n.Status != kc.Running {
			return kc.ErrSkip
		}
		s.Attempts++
		attempts = s.Attempts
		s.SetLastError(err.Error())
		s.Versions = r.versions() // what the next attempt compares its own with
		s.SetIntentsOpen(open, counted)
		if handingOver {
			if a.guarded != nil {
				n.Progress = a.guarded
			}
			n.Status = kc.HandedOver
			s.Status = kc.Failed
			handover.Name(n, note)
		}
		return nil
	})
	if errors.Is(werr, kc.ErrSkip) {
		return ack // verified by another, or the run stopped: nothing left to do
	}
	if werr != nil {
		a.log.Warn("recording a failed attempt", slog.Any("error", werr))
		return nakAfter(time.Second)
	}
	if handingOver {
		r.auditStep(a, "handover", a.Token.Value, err.Error())
		r.notify(wctx, "handover", note, a.Generation, a.Token.Value)
		r.m.Handovers.WithLabelValues(a.Step, "step_failed").Inc()
		r.observe(a, "handover")
		a.log.Error("run handed over", slog.String("note", note.ID), slog.Any("error", err))
		return ack
	}
	r.auditStep(a, "step.failed", a.Token.Value, err.Error())
	r.observe(a, "temporary")
	r.m.Retries.WithLabelValues(a.Step, "attempt").Inc()
	a.log.Warn("attempt failed, will retry", slog.Int("attempts", attempts), slog.Any("error", err))
	return nakAfter(backoff(attempts))
}
