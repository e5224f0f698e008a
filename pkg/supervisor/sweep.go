package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"

	"github.com/cairnhq/cairn/internal/stepevent"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/lease"
	"github.com/cairnhq/cairn/pkg/tracing"
)

// observe keeps a watched record. A record that does not decode or belongs to another epoch is
// left out; one that is corrupt (its sum, its invariants: kvcheckpoint.Record.Check) is handed
// over by a note alone at the next sweep, as the step that next touches it would. One a newer release
// wrote is left out too, to that release's supervisor: never swept, never handed over here.
func (s *Supervisor) observe(e jetstream.KeyValueEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, err := s.cfg.Store.DecodeWatched(context.Background(), &s.links, e.Key(), e.Value(), e.Revision()) // a forged or rolled-back record is left out as a damaged one
	if _, watched := s.runs[e.Key()]; watched && errors.Is(err, kc.ErrNewerSchema) {
		s.log.Info("run left to a newer release", slog.String("run_id", e.Key()), slog.Any("error", err))
	}
	if e.Operation() != jetstream.KeyValuePut || err != nil {
		delete(s.runs, e.Key())
		delete(s.seen, e.Key())
		delete(s.mail, e.Key())
		delete(s.bad, e.Key())
		if e.Operation() == jetstream.KeyValuePut && errors.Is(err, kc.ErrCorrupt) {
			s.distrust(e.Key(), e.Revision(), err)
		}
		return
	}
	prev, ok := s.runs[e.Key()]
	if !s.judge(prev, ok, rec, e.Revision()) {
		return // written beyond its writer's part: never acted on; the sweep puts the good record back
	}
	delete(s.bad, e.Key())
	w := watched{rec: rec, rev: e.Revision()}
	w.progress, w.approval = timers(prev, ok, rec, s.cfg.Now())
	s.runs[e.Key()] = w
}

// unchanged reports whether r has made no progress since the sweep saw w: a handover for
// what the sweep saw is written only then.
func (w watched) unchanged(r *kc.Record) bool { return !kc.Progressed(w.rec, r) }

// SweepOnce looks once at every run that is running or finishing, as the watch last saw it.
// At start (startup true) it asks every lease owner whether it is alive, so a restarted
// deployment resumes at once.
func (s *Supervisor) SweepOnce(ctx context.Context, startup bool) {
	s.noteUntrusted(ctx)
	s.restoreOverreached(ctx)
	s.mu.Lock()
	var live []watched
	for id, w := range s.runs {
		if rev, ok := s.panicked[id]; ok {
			if rev == w.rev {
				continue // its sweep panicked on this very record: a person has its note
			}
			delete(s.panicked, id)
		}
		switch {
		case liveStatus(w.rec):
			live = append(live, w)
		default:
			delete(s.seen, id)
		}
		if w.rec.Status != kc.Finishing {
			delete(s.mail, id)
		}
	}
	s.mu.Unlock()
	for _, w := range live {
		if ctx.Err() != nil {
			return
		}
		s.sweepGuarded(ctx, w, startup)
	}
}

// sweepWatched looks once at one run as the watch last saw it.
func (s *Supervisor) sweepWatched(ctx context.Context, w watched, startup bool) {
	if now := s.cfg.Now(); w.rec.Status == kc.WaitingApproval {
		if now.Sub(w.approval.began()) >= s.cfg.ApprovalTimeout {
			cause := fmt.Errorf("no one approved or rejected the plan of %s for %s (CAIRN_APPROVAL_TIMEOUT)", w.rec.Approval.Step, s.cfg.ApprovalTimeout)
			if err := s.handOver(ctx, w.rec.RunID, w.rec.Approval.Step, reasonApprovalTimeout, cause, w.unchanged); err != nil {
				s.log.Warn("handing over an unanswered approval", slog.String("run_id", w.rec.RunID), slog.Any("error", err))
			}
		}
		return
	}
	if w.rec.Status == kc.Finishing {
		if w.rec.Lease == nil && len(w.rec.Commands) > 0 {
			if err := s.drive(ctx, w.rec, w.rev); err != nil {
				s.log.Warn("driving a waiting command", slog.String("run_id", w.rec.RunID), slog.Any("error", err))
			}
		}
		// A finishing run waits on its mail alone: CAIRN_OUTBOX_STALL, not the stall timeout.
		if err := s.sweepFinishing(ctx, w); err != nil {
			s.log.Warn("sweeping a finishing run", slog.String("run_id", w.rec.RunID), slog.Any("error", err))
		}
		return
	}
	if now := s.cfg.Now(); w.rec.Status != kc.Undoing && now.Sub(w.progress.began()) >= s.cfg.StallTimeout && !s.regaining(w, now) {
		cause := fmt.Errorf("no progress for %s (CAIRN_STALL_TIMEOUT %s): status %s, waiting on %s", now.Sub(w.progress.began()).Round(time.Second), s.cfg.StallTimeout, w.rec.Status, cmpStep(w.rec.Current()))
		if err := s.handOver(ctx, w.rec.RunID, w.rec.Current(), reasonStall, cause, w.unchanged); err != nil {
			s.log.Warn("handing over a stalled run", slog.String("run_id", w.rec.RunID), slog.Any("error", err))
		}
		return
	}
	if err := s.sweepRun(ctx, w.rec, w.rev, startup); err != nil {
		s.log.Warn("sweeping run", slog.String("run_id", w.rec.RunID), slog.Any("error", err))
	}
}

// regaining: a run this supervisor found with no lease and its progress already old (at its
// start, after an outage longer than the stall timeout, or a run it meets first) is given a
// lease's time from when it was found for a step to take it again (the sweep republishes its
// step's event) before it is judged stalled. A run whose holder renews without progress, and a
// wait this supervisor saw begin, are judged as they stand.
func (s *Supervisor) regaining(w watched, now time.Time) bool {
	return !w.progress.watched && w.rec.Lease == nil && now.Sub(w.progress.seen) < s.cfg.Lease
}

func (s *Supervisor) sweepRun(ctx context.Context, rec *kc.Record, rev uint64, startup bool) error {
	runID := rec.RunID
	switch rec.Status {
	case kc.Finishing:
		return nil // a finishing run is swept by sweepFinishing
	case kc.Running, kc.Undoing:
	default:
		if len(rec.Commands) == 0 {
			return nil
		}
		// A stopped run (cancelled, handed over, done) whose command waits: its lease, if a
		// step still holds one, expires as a running run's does; then the command goes again.
	}
	now := s.cfg.Now()
	obs := observation{current: rec.Current(), since: now}
	obs.lease = lease.Mark(rec.Lease)
	s.mu.Lock()
	prev, known := s.seen[runID]
	if known && prev.lease == obs.lease && prev.current == obs.current {
		obs.since, obs.asked = prev.since, prev.asked
	}
	stale := rec.Lease != nil && !obs.asked && !startup && s.expiry.Overdue(now.Sub(obs.since))
	if stale {
		obs.asked = true
	}
	s.seen[runID] = obs
	s.mu.Unlock()
	if l := rec.Lease; l != nil {
		foreign := lease.CheckInbox(s.cfg.Space, *l)
		switch {
		case foreign != nil && handable(rec):
			// A forged or corrupt lease: its inbox is never asked, the lease never released.
			s.forget(runID)
			return s.handOver(ctx, runID, rec.Current(), reasonForeignInbox, foreign, func(r *kc.Record) bool { return r.Lease != nil && *r.Lease == *l })
		case foreign == nil && (startup || stale) && s.takeover.OwnerGone(ctx, *l):
			s.forget(runID)
			return s.reassign(ctx, runID, *l, "owner_gone", lease.GoneReason(*l))
		case s.expiry.Expired(now.Sub(obs.since)):
			s.forget(runID)
			return s.reassign(ctx, runID, *l, "expired", lease.ExpiredReason(*l, s.cfg.Lease))
		}
		return nil
	}
	if len(rec.Commands) > 0 {
		if err := s.drive(ctx, rec, rev); err != nil {
			return err
		}
	}
	if rec.Status != kc.Running && rec.Status != kc.Undoing {
		return nil
	}
	if rec.Status == kc.Undoing {
		// An undo whose compensator died: its command again, so it resumes from its cursor.
		if rec.Undo == nil || (!startup && now.Sub(obs.since) < s.cfg.Lease) {
			return nil
		}
		s.forget(runID)
		return s.republishUndo(ctx, rec, rev)
	}
	// No lease: each step the run waits on must have an event waiting, or get one.
	if obs.current == "" || (!startup && now.Sub(obs.since) < s.cfg.Lease) {
		return nil
	}
	for _, step := range rec.Ready() {
		stored, err := stepevent.Stored(ctx, s.cfg.JS, s.cfg.Space, runID, step)
		if err != nil {
			return err
		}
		if stored {
			continue
		}
		if err := s.republish(ctx, runID, step, rev); err != nil {
			return err
		}
	}
	return nil
}

func (s *Supervisor) forget(runID string) {
	s.mu.Lock()
	delete(s.seen, runID)
	s.mu.Unlock()
}

// reassign releases a lease whose owner is gone or expired and publishes its step again,
// unless the run has been reassigned CAIRN_REASSIGN_LIMIT times since it was last resumed:
// then it is handed over instead of looping.
func (s *Supervisor) reassign(ctx context.Context, runID string, l kc.Lease, reason, why string) error {
	n, err := s.reassignments(ctx, runID)
	if err != nil {
		return fmt.Errorf("counting the reassignments of %s: %w", runID, err)
	}
	if n >= s.cfg.ReassignLimit {
		cause := fmt.Errorf("reassigned %d times (CAIRN_REASSIGN_LIMIT %d); last: %s", n, s.cfg.ReassignLimit, why)
		return s.handOver(ctx, runID, l.Step, reasonReassignLimit, cause, func(r *kc.Record) bool { return r.Lease != nil && *r.Lease == l })
	}
	ctx, span := tracing.StartRun(ctx, runID, "supervisor reassign", attribute.String("cairn.step", l.Step), attribute.String("cairn.reason", reason))
	defer span.End()
	released, err := s.takeover.Release(ctx, runID, l, why)
	if released {
		s.cfg.Metrics.Reassignments.WithLabelValues(l.Step, reason).Inc()
		s.log.Info("lease released, step published again", slog.String("run_id", runID), slog.String("step", l.Step), slog.Uint64("token", l.Token), slog.String("reason", why))
	}
	return err
}

// republish records itself first, so its Msg-Id carries a revision of its own.
func (s *Supervisor) republish(ctx context.Context, runID, step string, rev uint64) error {
	ctx, span := tracing.StartRun(ctx, runID, "supervisor republish", attribute.String("cairn.step", step))
	defer span.End()
	rec, wrev, err := s.cfg.Store.Mutate(ctx, runID, func(r *kc.Record) error {
		if r.Status != kc.Running || r.Lease != nil || !slices.Contains(r.Ready(), step) {
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

// republishUndo publishes an interrupted undo's command again, under its request id, with an
// event id of its own (the revision it saw) so deduplication does not swallow it.
func (s *Supervisor) republishUndo(ctx context.Context, rec *kc.Record, rev uint64) error {
	c := events.Command{RequestID: rec.Undo.RequestID}
	if len(rec.Undo.Scope) > 0 && string(rec.Undo.Scope) != "null" {
		var sc events.UndoScope
		if err := json.Unmarshal(rec.Undo.Scope, &sc); err == nil && !sc.Empty() {
			c.Scope = &sc
		}
	}
	id := fmt.Sprintf("%s:again:%d", rec.Undo.RequestID, rev)
	e, err := events.New(id, events.TypeRunUndo, source, rec.RunID, s.cfg.Now(), c)
	if err != nil {
		return err
	}
	m, err := events.Encode(s.cfg.Space.Run(rec.RunID, events.VerbUndo), e)
	if err != nil {
		return err
	}
	if _, err := s.cfg.JS.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("publishing the undo of %s again: %w", rec.RunID, err)
	}
	s.log.Info("undo published again", slog.String("run_id", rec.RunID), slog.String("request_id", rec.Undo.RequestID))
	return nil
}

// liveStatus: a run the sweep drives: one that runs, finishes, undoes or waits for a person,
// or one a command waits in for the run's lease.
func liveStatus(r *kc.Record) bool {
	switch r.Status {
	case kc.Running, kc.Finishing, kc.Undoing, kc.WaitingApproval:
		return true
	}
	return len(r.Commands) > 0
}
