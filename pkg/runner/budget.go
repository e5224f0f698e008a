package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// The record's budget (kvcheckpoint, "The record's budget"), as the runner keeps it:
//
//   - a commit keeps outputs inline while the next step keeps its room (kc.StepRoom, what
//     that step checks before it starts), and an inline snapshot while kc.Room of the
//     committed record stays ≥ 0; short of that it moves inline outputs, the earlier steps'
//     too, to the artifact store in the commit itself; it lists parked items only while the
//     next step keeps its room (fitOutputs), decided from the record the commit is applied
//     to, so the same record always gets the same choice;
//   - before a step does anything (before its lease, so before any outside effect) it checks
//     that the record, with its lease, its commit and a failure, fits (roomFor); a record
//     without that room first has its inline outputs moved out (makeRoom), and a record that
//     still has none is handed over;
//   - a write that records a failure or a handover fits whatever else the record holds: the
//     store gives up diagnostics before it refuses one (kc.Fit).

// listMargin is what the next step keeps beyond its room when a commit lists parked items:
// the versions and restart note its take adds, which no projection knows.
const listMargin = 128

// fitOutputs decides, for the commit of res on base, which outputs stay inline and how many
// parked items the record lists. One criterion, the one the next step checks before it
// starts (roomFor): the committed record must leave the next step its room (kc.StepRoom)
// with listMargin to spare for what its take adds; and a record with an inline snapshot
// must keep the whole promise (kc.Room ≥ 0, which implies the former). Until it does, inline
// outputs move to the artifact store: the snapshot first (makeRoom does not move it, so it
// stays inline only within the whole promise), then the verified steps' outputs, the
// largest first, in this same commit, and the step's own last (the next step is the
// likeliest to read it), while a move gives anything back. Then the list shortens
// until the next step has its room. A list that does not show every item in full has its
// artifact. So a commit never leaves the next step a record it finds short (makeRoom is for
// records written otherwise: by an earlier release, or with room taken since).
func (r *Runner) fitOutputs(ctx context.Context, a *Attempt, base *kc.Record, res *Result, o outputs) (outputs, error) {
	next := base.Next(a.Step)
	committed := func() *kc.Record {
		n := measured(base)
		r.applyCommit(n, a, res, o)
		return n
	}
	// The room is measured on the committed record, then follows the moves by their sizes
	// (kc.OutputSize: a move changes the record's size by that, and no projection changes a
	// verified step's output or a snapshot), and is measured again to confirm a fit.
	var n *kc.Record
	stepRoom, room, haveRoom, since := 0, 0, false, 0
	earlier := true // the earlier steps' outputs may still give room back
	measure := func() {
		n = committed()
		stepRoom, haveRoom, since = kc.StepRoom(n, next), false, 0
	}
	fits := func() bool {
		if o.snapshot == nil || len(o.snapshot.Inline) == 0 {
			// kc.Room ≥ 0 would add nothing: its projection holds StepRoom's and more, so
			// Room ≤ StepRoom - its slack.
			return stepRoom+since >= listMargin
		}
		if !haveRoom {
			room, haveRoom = kc.Room(n), true
		}
		return room+since >= 0
	}
loop:
	for measure(); ; {
		if fits() {
			if since == 0 {
				break
			}
			measure()
			continue
		}
		ptr, from := o.snapshot, a.Step
		if (ptr == nil || len(ptr.Inline) == 0) && earlier {
			ptr, from = largestEarlier(base, o.moved, a.Step)
		}
		if ptr == nil && o.output != nil && len(o.output.Inline) > 0 {
			ptr, from = o.output, a.Step
		}
		if ptr == nil {
			break
		}
		moved, err := r.cfg.Artifacts.SaveObject(ctx, a.RunID, from, ptr.Inline)
		if err != nil {
			return o, Temporary(err)
		}
		back := kc.OutputSize(ptr) - kc.OutputSize(moved)
		switch {
		case back > 0 || ptr == o.snapshot:
		case ptr == o.output:
			break loop // smaller than its pointer: moving it gives nothing back
		default:
			earlier = false // the largest earlier one is smaller than its pointer, so are the rest
			continue
		}
		since += back
		if ptr == o.output || ptr == o.snapshot {
			*ptr = *moved
			continue
		}
		m := make(map[string]*kc.Output, len(o.moved)+1)
		maps.Copy(m, o.moved)
		m[from] = moved
		o.moved = m
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

// largestEarlier is the largest inline output of base's verified steps other than step and
// those moved already (the earliest of equal ones), and its step; nil when none is inline.
func largestEarlier(base *kc.Record, moved map[string]*kc.Output, step string) (*kc.Output, string) {
	var best *kc.Output
	name := ""
	for _, s := range base.Pipeline {
		st := base.Step(s)
		if s == step || moved[s] != nil || st.Status != kc.Verified || st.Output == nil || len(st.Output.Inline) == 0 {
			continue
		}
		if best == nil || len(st.Output.Inline) > len(best.Inline) {
			best, name = st.Output, s
		}
	}
	return best, name
}

// moveOutputs points the steps' outputs of n that moved to the artifact store (fitOutputs)
// at their objects: each only while it is still the inline output of the same digest.
// measured is a copy of r to apply a commit to and measure, never to write: the record and its
// steps one level deep, which is all applyCommit and moveOutputs change (they set fields; they
// write through no pointer they find), without a deep Clone's copies of every value.
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

func moveOutputs(n *kc.Record, moved map[string]*kc.Output) {
	for name, o := range moved {
		if s := n.Steps[name]; s != nil && s.Output != nil && s.Output.Digest == o.Digest && len(s.Output.Inline) > 0 {
			s.Output = o
		}
	}
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

// noRoom is a step whose record has no room for it, found before it did anything: the
// record's inline outputs move to the artifact store and the step is tried again; a record
// that has none left is handed over (the note, then the record), with nothing done.
func (r *Runner) noRoom(ctx context.Context, rec *kc.Record, rev uint64, retry func() settleFunc) settleFunc {
	run, step := rec.RunID, r.cfg.StepName
	moved, err := r.makeRoom(ctx, rec, rev)
	if err != nil {
		r.log.Warn("moving inline outputs out of the checkpoint", slog.String("run_id", run), slog.Any("error", err))
		return nakAfter(backoff(0))
	}
	if moved {
		return retry()
	}
	size, _ := kc.Size(rec)
	reason := fmt.Sprintf("%s: the record of %s (%d bytes) has no room for step %s's commit and a failure within %d bytes", ErrRecordFull, run, size, step, kc.MaxSize)
	r.handoverIdle(ctx, run, "record_full", reason)
	return ack
}

// makeRoom moves every inline output of rec's verified steps to the artifact store (an
// object of the same bytes and digest, under the step that made it) in one compare-and-set;
// it reports whether it moved any. The lease is copied unchanged.
func (r *Runner) makeRoom(ctx context.Context, rec *kc.Record, rev uint64) (bool, error) {
	moved := map[string]*kc.Output{}
	for _, name := range rec.Pipeline {
		s := rec.Step(name)
		if s.Output == nil || len(s.Output.Inline) == 0 {
			continue
		}
		o, err := r.cfg.Artifacts.SaveObject(ctx, rec.RunID, name, s.Output.Inline)
		if err != nil {
			return false, err
		}
		moved[name] = o
	}
	if len(moved) == 0 {
		return false, nil
	}
	_, _, err := r.cfg.Store.MutateFrom(ctx, rec, rev, rec.RunID, func(n *kc.Record) error {
		changed := false
		for name, o := range moved {
			if s := n.Steps[name]; s != nil && s.Output != nil && s.Output.Digest == o.Digest && len(s.Output.Inline) > 0 {
				s.Output = o
				changed = true
			}
		}
		if !changed {
			return kc.ErrSkip
		}
		return nil
	})
	if err != nil && !errors.Is(err, kc.ErrSkip) {
		return false, fmt.Errorf("moving the inline outputs of %q out: %w", rec.RunID, err)
	}
	r.log.Info("inline outputs moved to the artifact store for room", slog.String("run_id", rec.RunID), slog.Int("outputs", len(moved)))
	return true, nil
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
	note.RunID, note.ID = runID, runID+":handover:"+r.cfg.StepName+":"+tag
	if err := r.putNote(ctx, note); err != nil {
		r.log.Error("writing handover note", slog.Any("error", err))
	}
	_, rev, err := r.cfg.Store.Mutate(ctx, runID, func(n *kc.Record) error {
		if n.Status != kc.Running || n.Lease != nil {
			return kc.ErrSkip
		}
		n.Status = kc.HandedOver
		n.Step(r.cfg.StepName).Status = kc.Failed
		n.Step(r.cfg.StepName).SetLastError(reason)
		n.Handover = &note.ID
		n.NextAction = note.NextAction
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
