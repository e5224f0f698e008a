package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"

	"github.com/cairnhq/cairn/internal/handover"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// reasonOverreach is the handover reason of a run one of whose writers changed what is not
// its own (kvcheckpoint.Roles.Changed).
const reasonOverreach = "overreach"

// overreached is a run the watch saw written beyond its writer's part: good is the record
// before that write, which the sweep puts back, handed over; cause says what was changed.
type overreached struct {
	good  watched
	rev   uint64 // the first revision that overreached
	cause error
}

// judge checks the link from prev to rec, the record written over it, as the watch sees it;
// s.mu is held. It returns false when rec overreached: rec is not kept (never acted on) and
// the run waits for restoreOverreached. A run already overreached stays so until the
// supervisor's own write puts its good record back.
func (s *Supervisor) judge(prev watched, seen bool, rec *kc.Record, rev uint64) bool {
	key := rec.RunID
	if _, held := s.over[key]; held {
		if s.handedOverByMe(rec) {
			delete(s.over, key) // put back and handed over: a person decides
			return true
		}
		return false
	}
	if !seen || rec.Prev != prev.rev {
		return true // not a link the watch saw whole (at start, or a revision it missed): the reader's own checks stand
	}
	if err := s.cfg.Store.Changed(prev.rec, rec); err != nil {
		s.over[key] = overreached{good: prev, rev: rev, cause: fmt.Errorf("revision %d: %w", rev, err)}
		delete(s.runs, key) // not swept until its good record is back
		return false
	}
	return true
}

// judgeHistory judges, at start, the kept links of every live run (the bucket keeps 16
// revisions of each), which the watch, beginning at the latest record, did not see: a write
// beyond its writer's part made while no supervisor watched is put back as one seen live is,
// unless the supervisor's own handover since (a put-back, or any other) stands after it. It
// reads each live run's history once, at start.
func (s *Supervisor) judgeHistory(ctx context.Context) {
	s.mu.Lock()
	var live []string
	for id, w := range s.runs {
		if liveStatus(w.rec) {
			live = append(live, id)
		}
	}
	s.mu.Unlock()
	for _, id := range live {
		hist, err := s.cfg.Store.History(ctx, id)
		if err != nil {
			s.log.Warn("reading a run's history at start", slog.String("run_id", id), slog.Any("error", err))
			continue
		}
		var bad *overreached
		for i := 1; i < len(hist); i++ {
			a, b := hist[i-1], hist[i]
			if b.Err == nil && s.handedOverByMe(b.Rec) {
				bad = nil // a person has it
				continue
			}
			if bad != nil || a.Err != nil || b.Err != nil || b.Rec.Prev != a.Rev {
				continue
			}
			if err := s.cfg.Store.Changed(a.Rec, b.Rec); err != nil {
				bad = &overreached{good: watched{rec: a.Rec, rev: a.Rev}, rev: b.Rev, cause: fmt.Errorf("revision %d: %w", b.Rev, err)}
			}
		}
		if bad != nil {
			s.mu.Lock()
			if _, held := s.over[id]; !held {
				s.over[id] = *bad
			}
			delete(s.runs, id)
			s.mu.Unlock()
		}
	}
}

// handedOverByMe: rec is a handover this supervisor signed (a put-back, or any other).
func (s *Supervisor) handedOverByMe(rec *kc.Record) bool {
	sg := s.cfg.Store.Signer()
	return sg != nil && rec.Sig != nil && rec.Sig.By == sg.Name() && rec.Status == kc.HandedOver
}

// restoreOverreached puts back, as the supervisor's own write, the last good record of every
// run a writer overreached, handed over (status handed_over, no lease) with a note naming
// what was changed and by whom: what was written beyond a writer's part is never acted on,
// and a person decides (cairn resume, or cairn undo). A record that cannot be read at all
// (it fails a reader's own checks) is left to the note of an untrusted record.
func (s *Supervisor) restoreOverreached(ctx context.Context) {
	s.mu.Lock()
	todo := maps.Clone(s.over)
	s.mu.Unlock()
	for runID, o := range todo {
		if err := s.restore(ctx, runID, o); err != nil {
			s.log.Warn("putting back an overreached record", slog.String("run_id", runID), slog.Any("error", err))
		}
	}
}

func (s *Supervisor) restore(ctx context.Context, runID string, o overreached) error {
	step := ""
	if l := o.good.rec.Lease; l != nil {
		step = l.Step
	}
	note := handover.Note{
		ID: fmt.Sprintf("%s:handover:%s:%d", runID, reasonOverreach, o.rev), RunID: runID, Step: step,
		Error: cut(o.cause.Error(), kc.MaxLastError),
		NextAction: kc.CutText(fmt.Sprintf("the record before revision %d is put back; a person decides: cairn resume %[2]s, or cairn undo %[2]s", o.rev, s.cfg.Space.RunArg(runID)),
			kc.NextActionRoom(runID)),
		At:   s.stamp(),
		Done: handover.DoneOf(o.good.rec, s.cfg.Pipeline, step, nil),
	}
	if err := handover.Put(ctx, s.cfg.Handovers, note); err != nil {
		return err
	}
	_, rev, err := s.cfg.Store.Mutate(ctx, runID, func(r *kc.Record) error {
		*r = *o.good.rec.Clone()
		r.Status = kc.HandedOver
		r.Lease = nil
		handover.Name(r, note)
		return nil
	})
	if errors.Is(err, kc.ErrCorrupt) {
		// The latest record fails a reader's own checks: nobody acts on it, and the watch
		// notes it as an untrusted record.
		s.mu.Lock()
		delete(s.over, runID)
		s.mu.Unlock()
		return fmt.Errorf("putting back the record of %s: %w", runID, err)
	}
	if err != nil {
		return fmt.Errorf("recording the handover of %s: %w", runID, err)
	}
	s.forget(runID)
	if s.cfg.Notify != nil {
		s.cfg.Notify(ctx, "handover", note, o.good.rec.Generation, 0)
	}
	s.cfg.Metrics.Handovers.WithLabelValues(cmpStep(step), reasonOverreach).Inc()
	s.record(ctx, events.AuditStepID(runID, cmpStep(step), "handover", rev), events.Audit{RunID: runID, Step: step, Event: "handover", Detail: cut(o.cause.Error(), 512)})
	s.log.Error("run handed over: a writer changed what is not its own", slog.String("run_id", runID), slog.Any("error", o.cause))
	return nil
}
