package supervisor

import (
	"time"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// timer is when one of a run's waits began: its last progress (the stall timeouts) or its
// wait for a person (the approval timeout). The record stores when each began, by its
// writer's clock (progressed_at, approval.since), so a restarted supervisor goes on counting
// instead of starting again; the supervisor judges them by its own clock (Config.Now).
type timer struct {
	seen    time.Time // when this supervisor first saw the wait, by its own clock
	stored  string    // when the record says it began, by its writer's clock
	watched bool      // this supervisor saw the record before the wait began: it saw it begin
}

// began is when the wait began, by the supervisor's clock. A wait the supervisor saw begin
// (it watched the record change) began when it saw it: the writer's clock plays no part, so
// a writer whose clock is behind cannot end it early. A wait it found already begun (at its
// start, or in a run it meets first) began at the stored time, never later than when the
// supervisor first saw it: a writer whose clock is ahead cannot put its end off, and a time
// in the supervisor's own future is never judged. Only for waits found already begun can a
// writer's clock behind the supervisor's end the wait early, by at most its lag (keep the
// clocks synchronised).
func (t timer) began() time.Time {
	if !t.watched {
		if at, err := time.Parse(time.RFC3339Nano, t.stored); err == nil && at.Before(t.seen) {
			return at
		}
	}
	return t.seen
}

// timers are rec's progress and approval timers, carried over from prev (what the watch
// delivered before, ok false when none) while the wait goes on.
func timers(prev watched, ok bool, rec *kc.Record, now time.Time) (progress, approval timer) {
	switch {
	case !ok:
		progress = timer{seen: now, stored: rec.ProgressedAt}
	case kc.Progressed(prev.rec, rec):
		progress = timer{seen: now, stored: rec.ProgressedAt, watched: true}
	default:
		progress = prev.progress // a lease renewal is not progress
	}
	a := rec.Approval
	switch {
	case rec.Status != kc.WaitingApproval:
	case a == nil: // not written so by this release: the run's progress stands in
		approval = progress
	case ok && waitsFor(prev.rec, a):
		approval = prev.approval
	default:
		approval = timer{seen: now, stored: a.Since, watched: ok}
	}
	return progress, approval
}

// waitsFor reports whether r waits for the approval a (the same step, plan and wait).
func waitsFor(r *kc.Record, a *kc.Approval) bool {
	p := r.Approval
	return r.Status == kc.WaitingApproval && p != nil && p.Step == a.Step && p.PlanDigest == a.PlanDigest && p.Since == a.Since
}
