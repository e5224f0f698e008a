package runner

import (
	"context"
	"fmt"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// The drift rule: a run's source is checked whenever the run continues after a break,
// before the step does anything (fences, approval, outside writes).
//
// A step continues without a break when the record it starts from is, unchanged, the
// commit of the step before it made by this very process (kvcheckpoint's
// Store.MarkCommit and CommittedHere: the revision it read is the one this process
// committed and marked). Everything else is a break: a restart (the step was in progress,
// or a lease-free step's event came back), a resume, a rerun, a reassignment or any event
// the supervisor published (each is its own write), a retry after a failed attempt (the
// failure is a write), and a step taken by another process, which under one service per
// step is every step but the first. Under cairn dev, one process running every step, a
// night without faults has no break after its first step.
//
// A commit is marked only when its attempt vouches for the source: it continued without a
// break, or it checked the source, or it read the source itself (it set the fingerprint),
// or the run has no fingerprint to check. A step without a SourceChecker that starts
// after a break leaves its commit unmarked, so the next step counts a break and checks:
// the check owed by a break is never lost on the way to the first step that writes.

// checksSourceAgrees checks that the pipeline's definition of the step (ChecksSource) and
// its implementation (a SourceChecker) agree, so that `cairn faultmap` prints what runs.
func checksSourceAgrees(c Config) error {
	def, ok := c.Pipeline.Step(c.StepName)
	if !ok || c.Step == nil {
		return nil
	}
	if _, checks := c.Step.(SourceChecker); checks != def.ChecksSource {
		return fmt.Errorf("step %q: its definition says it checks the source %t, its implementation %t (a SourceChecker)", c.StepName, def.ChecksSource, checks)
	}
	return nil
}

// driftState is what an attempt knows of the drift rule.
type driftState struct {
	continued bool // it starts from this process's marked commit of the step before
	vouched   bool // its commit may be marked: the next step continues from it
}

// continues reports whether a step of run that starts from revision rev, restart or not,
// continues from this process's own commit of the step before it.
func (r *Runner) continues(runID string, rev uint64, restart bool) bool {
	return !restart && r.cfg.Store.CommittedHere(runID, rev)
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
	sc, ok := r.cfg.Step.(SourceChecker)
	if !ok || !r.def.ChecksSource {
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

// markCommit marks a commit the next step may continue from, when the attempt vouches
// for the source or set the fingerprint itself; it runs before the next step's event is
// published.
func (r *Runner) markCommit(a *Attempt, committed *kc.Record, crev uint64) {
	read := committed.SourceFingerprint != nil &&
		(a.rec.SourceFingerprint == nil || *a.rec.SourceFingerprint != *committed.SourceFingerprint)
	if a.drift.vouched || read {
		r.cfg.Store.MarkCommit(committed.RunID, crev)
	}
}
