package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/cairnhq/cairn/internal/loopguard"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// Progress is what a step has made durable, read back from where it keeps it (a memo, the
// outside system, the outbox), by kind, and the first item it has not done.
type Progress struct {
	Memoised int // answers memoised (refusals included)
	Keys     int // keyed writes standing in the outside system
	Parked   int // items parked
	Messages int // messages queued
	// Next is the first item not yet done ("" when none is left or the step cannot tell):
	// the item a step that keeps dying is stuck at.
	Next string
	// Standing are the keys and messages that stand (the first ones, when many), and Where
	// tells a person how to list them all.
	Standing []string
	Where    string
}

// Total is the loop guard's measure: everything the step made durable.
func (p Progress) Total() int { return p.Memoised + p.Keys + p.Parked + p.Messages }

// ProgressCounter is a step that can tell what it has made durable. The loop guard of a
// step with a counter counts consecutive attempts that ended with no more (Config.LoopGuard),
// instead of every failed attempt; the handover note reads the step's own writes from it.
// It is called only after an attempt failed or died, never on the way of a step that does
// not fail. It must not write anything.
type ProgressCounter interface {
	Progress(ctx context.Context, a *Attempt) (Progress, error)
}

// counter is the step's progress counter, if it has one.
func (r *Runner) counter() (ProgressCounter, bool) {
	pc := r.hooks.counter
	return pc, pc != nil
}

// count asks the step what it made durable, remembering the answer on the attempt for its
// handover note.
func (r *Runner) count(ctx context.Context, pc ProgressCounter, a *Attempt) (Progress, error) {
	p, err := pc.Progress(ctx, a)
	if err != nil {
		return p, fmt.Errorf("counting the progress of %s: %w", a.Step, err)
	}
	a.progress = &p
	return p, nil
}

// guardCount counts an attempt that follows one that failed or died and compares it with
// the record's count. It returns the count to store, and a permanent error when
// CAIRN_LOOP_GUARD attempts in a row made no progress.
func (r *Runner) guardCount(ctx context.Context, pc ProgressCounter, a *Attempt, cur *kc.Record, last string) (kc.Progress, error) {
	p, err := r.count(ctx, pc, a)
	if err != nil {
		return kc.Progress{}, Temporary(err)
	}
	np := loopguard.Next(cur.Progress, a.Step, p.Total())
	a.guarded = &np
	if np.NoProgress == 0 {
		// Stored before the attempt goes on: the supervisor's reassignment limit counts
		// from the last one, and the attempt may die at any moment.
		id, ev := r.stepAudit(a, "step.progressed", a.Token.Value, strconv.Itoa(np.Count))
		if err := r.audit.Record(ctx, id, ev); err != nil {
			a.log.Warn("audit event not stored", slog.Any("error", err))
		}
	}
	a.log.Info("loop guard counted", slog.Int("count", np.Count), slog.Int("no_progress", np.NoProgress), slog.String("next", p.Next))
	if np.NoProgress >= r.cfg.LoopGuard {
		return np, Permanent(noProgress(a.Step, np.NoProgress, r.cfg.LoopGuard, p.Next, last))
	}
	return np, nil
}

func noProgress(step string, n, guard int, next, last string) error {
	at := ""
	if next != "" {
		at = "; stuck at " + next
	}
	return fmt.Errorf("%d attempts of %s made no progress (loop guard %d)%s; last: %s", n, step, guard, at, last)
}

// guardRestart is the loop guard of a leased step that restarts (its previous attempt
// died): with a counter it counts and stores the count; without, every attempt counts.
func (r *Runner) guardRestart(ctx context.Context, a *Attempt, h *kc.Holder) error {
	cur, _ := h.Record()
	s := cur.Step(a.Step)
	last := ""
	if s.LastError != nil {
		last = *s.LastError
	}
	pc, ok := r.counter()
	if !ok {
		if s.Attempts >= r.cfg.LoopGuard {
			return Permanent(fmt.Errorf("%d attempts of %s failed (loop guard %d); last: %s", s.Attempts, a.Step, r.cfg.LoopGuard, last))
		}
		return nil
	}
	np, gerr := r.guardCount(ctx, pc, a, cur, last)
	if classify(gerr) == classTemporary {
		return gerr
	}
	if err := h.Write(ctx, func(n *kc.Record) error { n.Progress = &np; return nil }); err != nil {
		return fmt.Errorf("recording the loop guard's count: %w", err)
	}
	return gerr
}

// guardFailure is the loop guard of a leased attempt that failed temporarily: with a
// counter it counts what the attempt left (np, to store with the failure); without, the
// failure that reaches the guard hands the run over. over is the handover's cause, or nil.
func (r *Runner) guardFailure(ctx context.Context, a *Attempt, cur *kc.Record, err error) (np *kc.Progress, over error) {
	pc, ok := r.counter()
	if !ok {
		if n := cur.Step(a.Step).Attempts + 1; n >= r.cfg.LoopGuard {
			return nil, fmt.Errorf("%d attempts failed (loop guard %d): %w", n, r.cfg.LoopGuard, err)
		}
		return nil, nil
	}
	p, gerr := r.guardCount(ctx, pc, a, cur, err.Error())
	if classify(gerr) == classTemporary {
		// Not counted: the attempt counts as one without progress, as a step without a
		// counter would.
		a.log.Warn("the loop guard could not count", slog.Any("error", gerr))
		p = loopguard.Next(cur.Progress, a.Step, -1)
		a.guarded = &p
		if p.NoProgress >= r.cfg.LoopGuard {
			return &p, noProgress(a.Step, p.NoProgress, r.cfg.LoopGuard, "", err.Error())
		}
		return &p, nil
	}
	return &p, gerr
}

// guardLeaseFree counts a lease-free step's redelivered attempt (after a failure or a death)
// before it runs and stores the count, returning the record as written. Without a counter
// it does nothing (the failure that reaches the guard hands the run over).
func (r *Runner) guardLeaseFree(ctx context.Context, a *Attempt, rec *kc.Record, rev uint64) (*kc.Record, uint64, error) {
	pc, ok := r.counter()
	if !ok {
		return rec, rev, nil
	}
	last := ""
	if s := rec.Step(a.Step); s.LastError != nil {
		last = *s.LastError
	}
	np, gerr := r.guardCount(ctx, pc, a, rec, last)
	if classify(gerr) == classTemporary {
		return rec, rev, gerr
	}
	n, nrev, err := r.cfg.Store.MutateFrom(ctx, rec, rev, a.RunID, func(n *kc.Record) error {
		if n.Step(a.Step).Status == kc.Verified || n.Generation != a.Generation || n.Status != kc.Running {
			return kc.ErrSkip
		}
		n.Progress = &np
		return nil
	})
	if errors.Is(err, kc.ErrSkip) {
		return rec, rev, err
	}
	if err != nil {
		return rec, rev, Temporary(fmt.Errorf("recording the loop guard's count: %w", err))
	}
	return n, nrev, gerr
}

// guardsByAttempts says whether a failure of a lease-free step counts toward the loop guard
// by itself (a step without a counter); with a counter, the next attempt counts.
func (r *Runner) guardsByAttempts() bool {
	_, ok := r.counter()
	return !ok
}
