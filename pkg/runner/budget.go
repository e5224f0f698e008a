package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/cairnhq/cairn/internal/handover"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// The record's budget (kvcheckpoint, "The record's budget"), as the runner keeps it:
//
//   - a commit keeps outputs inline: the budget counts them as room lent (kc.StepRoom counts
//     the verified steps' inline outputs as objects), and the write that needs their room
//     moves them to the artifact store itself (the Store's mover, which New installs);
//   - a commit keeps an inline snapshot while kc.Room of the committed record stays ≥ 0,
//     short of that it moves the snapshot to the artifact store in the commit itself; it
//     lists parked items only while the next step keeps its room (fitOutputs), decided from
//     the record the commit is applied to, so the same record always gets the same choice;
//   - before a step does anything (before its lease, so before any outside effect) it checks
//     that the record, with its lease, its commit and a failure, fits (roomFor); a record
//     without that room is handed over, with nothing done (noRoom);
//   - a write that records a failure or a handover fits whatever else the record holds: the
//     store moves inline outputs out, then gives up diagnostics, before it refuses one.

// listMargin is what the next step keeps beyond its room when a commit lists parked items:
// the versions and restart note its take adds, which no projection knows.
const listMargin = 128

// fitOutputs decides, for the commit of res on base, which outputs stay inline and how many
// parked items the record lists. Outputs stay inline (room lent: see above); an inline
// snapshot stays only within the whole promise (kc.Room ≥ 0 on the committed record), else it
// moves to the artifact store. Then the list shortens until the committed record leaves the
// next step its room (kc.StepRoom, what that step checks before it starts) with listMargin to
// spare for what its take adds. A list that does not show every item in full has its
// artifact.
func (r *Runner) fitOutputs(ctx context.Context, a *Attempt, base *kc.Record, res *Result, o outputs) (outputs, error) {
	next := base.Next(a.Step)
	committed := func() *kc.Record {
		n := measured(base)
		r.applyCommit(n, a, res, o)
		return n
	}
	if o.snapshot != nil && len(o.snapshot.Inline) > 0 && kc.Room(committed()) < 0 {
		moved, err := r.cfg.Artifacts.SaveObject(ctx, a.RunID, a.Step, o.snapshot.Inline)
		if err != nil {
			return o, Temporary(err)
		}
		o.snapshot = moved
	}
	for o.listed > 0 {
		n := committed()
		if kc.StepRoom(n, next) >= listMargin {
			break
		}
		o.listed--
	}
	if o.parked == nil && (o.listed < len(res.Parked) || slices.ContainsFunc(res.Parked[:o.listed], longParked)) {
		b, err := jsonMarshal(res.Parked)
		if err != nil {
			return o, err
		}
		if o.parked, err = r.cfg.Artifacts.Save(ctx, a.RunID, a.Step, b); err != nil {
			return o, Temporary(err)
		}
		if len(o.parked.Inline) > 0 { // the list is small, but the record has no room for it
			if o.parked, err = r.cfg.Artifacts.SaveObject(ctx, a.RunID, a.Step, b); err != nil {
				return o, Temporary(err)
			}
		}
	}
	return o, nil
}

// measured is a copy of r to apply a commit to and measure, never to write: the record and its
// steps one level deep, which is all applyCommit changes (it sets fields; it writes through no
// pointer it finds), without a deep Clone's copies of every value.
func measured(r *kc.Record) *kc.Record {
	c := *r
	c.Steps = make(map[string]*kc.Step, len(r.Steps))
	for name, s := range r.Steps {
		if s != nil {
			cs := *s
			s = &cs
		}
		c.Steps[name] = s
	}
	return &c
}

// longParked: an item the record lists cut (its artifact has it in full).
func longParked(p kc.Parked) bool { return len(p.Item) > 64 || len(p.Reason) > 48 }

// roomFor says whether rec, read at rev, has room for step: its lease, its commit with its
// outputs as objects, a failure and a handover (kc.StepRoom of the record as the take would
// write it).
func (r *Runner) roomFor(rec *kc.Record, rev uint64, step string, prepare func(*kc.Record)) bool {
	planned := rec.Clone()
	planned.Lease = &kc.Lease{Owner: r.owner.Name, OwnerInbox: r.owner.Inbox, Token: rev, Step: step, WriteID: "w-" + "0000000000000000000000"}
	if prepare != nil {
		prepare(planned)
	}
	return kc.StepRoom(planned, step) >= 0
}

// noRoom is a step whose record has no room for it, found before it did anything: the run is
// handed over (the note, then the record), with nothing done. Moving inline outputs out
// would give nothing back: the room already counts them as objects.
func (r *Runner) noRoom(ctx context.Context, rec *kc.Record) settleFunc {
	size, _ := kc.Size(rec)
	reason := fmt.Sprintf("%s: the record of %s (%d bytes) has no room for step %s's commit and a failure within %d bytes", ErrRecordFull, rec.RunID, size, r.cfg.StepName, kc.MaxSize)
	r.handoverIdle(ctx, rec.RunID, "record_full", reason)
	return ack
}

// handoverIdle hands over a running run whose step holds no lease: the note, then the record
// (status handed_over, the step failed) by compare-and-set. For what this runner cannot
// start: a record without room, a message at its delivery limit.
func (r *Runner) handoverIdle(ctx context.Context, runID, tag, reason string) {
	rec, _, err := r.cfg.Store.Load(ctx, runID)
	if errors.Is(err, kc.ErrNewerSchema) {
		return
	}
	cause := errors.New(reason)
	note := r.note(rec, r.cfg.StepName, tag, cause, nil) // what the record knows of what was done
	note.RunID, note.ID = runID, handover.ID(runID, r.cfg.StepName, tag)
	if err := handover.Put(ctx, r.cfg.Handovers, note); err != nil {
		r.log.Error("writing handover note", slog.Any("error", err))
	}
	_, rev, err := r.cfg.Store.Mutate(ctx, runID, func(n *kc.Record) error {
		if n.Status != kc.Running || n.Lease != nil {
			return kc.ErrSkip
		}
		n.Status = kc.HandedOver
		n.Step(r.cfg.StepName).Status = kc.Failed
		n.Step(r.cfg.StepName).SetLastError(reason)
		handover.Name(n, note)
		return nil
	})
	if err != nil {
		if !errors.Is(err, kc.ErrSkip) {
			r.log.Error("recording a handover", slog.String("run_id", runID), slog.Any("error", err))
		}
		return
	}
	_ = r.audit.Record(ctx, events.AuditStepID(runID, r.cfg.StepName, "handover", rev), events.Audit{RunID: runID, Step: r.cfg.StepName, Event: "handover", Owner: r.owner.Name, Detail: cut(reason, 512)})
	r.notify(ctx, "handover", note, 0, 0)
	r.m.Handovers.WithLabelValues(r.cfg.StepName, tag).Inc()
	r.log.Error("run handed over", slog.String("run_id", runID), slog.String("note", note.ID), slog.String("error", reason))
}
