package runner

import (
	"context"
	"fmt"

	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// The drift rule: a run's source is checked whenever the run continues after a break,
// before the step does anything (fences, approval, outside writes).
//
// A step continues without a break when the record it starts from is, unchanged, the
// commit that scheduled it, and the attempt that made that commit vouched for the source:
// the step's event carries the commit's revision in events.StepReady.Vouched, and the
// revision read is that one. Everything else is a break: a restart (the step was in
// progress, or a lease-free step's event came back), a resume, a rerun, a reassignment or
// any event the supervisor published (it vouches for nothing, and most are their own write),
// a crash between a commit and its step event (the supervisor publishes it), a retry after
// a failed attempt (the failure is a write), and any write to the record since the commit.
// A step handed on from one service to the next in the ordinary way is no break, whether
// both run in one process (cairn dev) or in two: a night without faults checks its source
// at no step after fetch.
//
// A commit vouches when its attempt continued without a break, or checked the source, or
// read the source itself (it set the fingerprint), or the run has no fingerprint to check.
// A step without a SourceChecker that starts after a break does not vouch, so the next step
// counts a break and checks: the check owed by a break is never lost on the way to the
// first step that writes.

// driftState is what an attempt knows of the drift rule.
type driftState struct {
	continued bool // it starts, unchanged, from the vouched commit that scheduled it
	vouched   bool // its commit may be marked: the next step continues from it
}

// continues reports whether a step whose event is ready and that starts from revision
// rev, restart or not, continues without a break from a vouched commit.
func continues(ready events.StepReady, rev uint64, restart bool) bool {
	return !restart && ready.Vouched != 0 && ready.Vouched == rev
}

// checkDrift applies the drift rule to an attempt that starts from cur: after a break a
// step with a SourceChecker re-checks the run's source, and a change is a permanent error
// (ErrSourceChanged) naming the documents, which hands the run over before any outside
// write.
func (r *Runner) checkDrift(ctx context.Context, a *Attempt, cur *kc.Record) error {
	if a.drift.continued || cur.SourceFingerprint == nil {
		a.drift.vouched = true
		return nil
	}
	sc := r.hooks.sourceChecker
	if sc == nil || !r.def.ChecksSource {
		return nil // unmarked: the next step checks
	}
	changed, err := sc.CheckSource(ctx, a, *cur.SourceFingerprint)
	if err != nil {
		return fmt.Errorf("re-hashing the source: %w", err)
	}
	if len(changed) > 0 {
		return Permanent(fmt.Errorf("%w since the run read it: %v", ErrSourceChanged, changed))
	}
	r.auditStep(a, "source.checked", a.Token.Value, "unchanged since the run read it")
	a.drift.vouched = true
	return nil
}

// vouches is the revision to carry in the next step's event as vouched (crev), or 0 when
// the attempt that committed it does not vouch for the source.
func (r *Runner) vouches(a *Attempt, committed *kc.Record, crev uint64) uint64 {
	read := committed.SourceFingerprint != nil &&
		(a.rec.SourceFingerprint == nil || *a.rec.SourceFingerprint != *committed.SourceFingerprint)
	if a.drift.vouched || read {
		return crev
	}
	return 0
}
