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

// observe keeps a watched record. A record that does not decode or belongs to another epoch is
// left out: the step that next touches it hands it over by its note.
func (s *Supervisor) observe(e jetstream.KeyValueEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, err := kc.Decode(e.Value())
	if e.Operation() != jetstream.KeyValuePut || err != nil || rec.Epoch != s.cfg.Store.Epoch() {
		delete(s.runs, e.Key())
		delete(s.seen, e.Key())
		return
	}
	s.runs[e.Key()] = watched{rec: rec, rev: e.Revision()}
}

// SweepOnce looks once at every run that is running or finishing, as the watch last saw it.
// At start (startup true) it asks every lease owner whether it is alive, so a restarted
// deployment resumes at once.
func (s *Supervisor) SweepOnce(ctx context.Context, startup bool) {
	s.mu.Lock()
	var live []watched
	for id, w := range s.runs {
		if w.rec.Status == kc.Running || w.rec.Status == kc.Finishing {
			live = append(live, w)
		} else {
			delete(s.seen, id)
		}
	}
	s.mu.Unlock()
	for _, w := range live {
		if ctx.Err() != nil {
			return
		}
		if err := s.sweepRun(ctx, w.rec, w.rev, startup); err != nil {
			s.log.Warn("sweeping run", slog.String("run_id", w.rec.RunID), slog.Any("error", err))
		}
	}
}

func (s *Supervisor) sweepRun(ctx context.Context, rec *kc.Record, rev uint64, startup bool) error {
	runID := rec.RunID
	switch rec.Status {
	case kc.Finishing:
		_, err := Settle(ctx, s.cfg.JS, s.cfg.Store, s.cfg.Marks, runID, s.cfg.Now)
		return err
	case kc.Running:
	default:
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
