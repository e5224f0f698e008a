package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
)

// SweepOnce looks at every run once. At start (startup true) it asks every lease owner
// whether it is alive, so a restarted deployment resumes at once.
func (s *Supervisor) SweepOnce(ctx context.Context, startup bool) {
	lister, err := s.cfg.Store.KV().ListKeys(ctx)
	if err != nil {
		if !errors.Is(err, jetstream.ErrNoKeysFound) {
			s.log.Warn("listing runs", slog.Any("error", err))
		}
		return
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	for _, runID := range keys {
		if ctx.Err() != nil {
			return
		}
		if err := s.sweepRun(ctx, runID, startup); err != nil {
			s.log.Warn("sweeping run", slog.String("run_id", runID), slog.Any("error", err))
		}
	}
}

func (s *Supervisor) sweepRun(ctx context.Context, runID string, startup bool) error {
	rec, rev, err := s.cfg.Store.Load(ctx, runID)
	if err != nil {
		return err
	}
	switch rec.Status {
	case kc.Finishing:
		_, err := Settle(ctx, s.cfg.JS, s.cfg.Store, s.cfg.Marks, runID, s.cfg.Now)
		return err
	case kc.Running:
	default:
		s.forget(runID)
		return nil
	}
	now := s.cfg.Now()
	obs := observation{current: rec.Current(), since: now}
	if rec.Lease != nil {
		obs.lease = fmt.Sprintf("%d/%s", rec.Lease.Token, rec.Lease.WriteID)
	}
	s.mu.Lock()
	prev, known := s.seen[runID]
	if known && prev.lease == obs.lease && prev.current == obs.current {
		obs.since = prev.since
	}
	s.seen[runID] = obs
	s.mu.Unlock()
	if l := rec.Lease; l != nil {
		switch {
		case startup && runner.OwnerGone(ctx, s.cfg.JS.Conn(), l.OwnerInbox, s.cfg.TakeoverGap):
			return runner.ReleaseLease(ctx, s.cfg.JS, s.cfg.Store, source, runID, *l, "owner "+l.Owner+" gone (no responders)", s.cfg.Now)
		case now.Sub(obs.since) >= s.cfg.Lease:
			return s.expire(ctx, runID, *l)
		}
		return nil
	}
	// No lease: the step the run waits on must have an event waiting, or get one.
	step := obs.current
	if step == "" || (!startup && now.Sub(obs.since) < s.cfg.Lease) {
		return nil
	}
	stored, err := runner.StepEventStored(ctx, s.cfg.JS, runID, step)
	if err != nil || stored {
		return err
	}
	return s.republish(ctx, runID, step, rev)
}

func (s *Supervisor) forget(runID string) {
	s.mu.Lock()
	delete(s.seen, runID)
	s.mu.Unlock()
}

// expire releases a lease not renewed for the lease duration, judged by this clock.
func (s *Supervisor) expire(ctx context.Context, runID string, l kc.Lease) error {
	s.forget(runID)
	why := fmt.Sprintf("lease of %s expired (not renewed for %s)", l.Owner, s.cfg.Lease)
	return runner.ReleaseLease(ctx, s.cfg.JS, s.cfg.Store, source, runID, l, why, s.cfg.Now)
}

// republish records itself first, so its Msg-Id carries a revision of its own.
func (s *Supervisor) republish(ctx context.Context, runID, step string, rev uint64) error {
	rec, wrev, err := s.cfg.Store.Mutate(ctx, runID, func(r *kc.Record) error {
		if r.Status != kc.Running || r.Lease != nil || r.Current() != step {
			return kc.ErrSkip
		}
		r.NextAction = fmt.Sprintf("run step %s of %s (event published again by the supervisor)", step, runID)
		return nil
	})
	if errors.Is(err, kc.ErrSkip) {
		return nil
	}
	if err != nil {
		return err
	}
	s.forget(runID)
	s.record(ctx, events.AuditStepID(runID, step, "republished", wrev), events.Audit{RunID: runID, Step: step, Event: "republished"})
	return s.publish(ctx, runID, step, rec.Generation, wrev)
}
