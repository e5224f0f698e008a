package kvcheckpoint

import (
	"fmt"
	"slices"
)

// UndoLease is the step name the compensator's lease carries: the one lease whose step is
// not a step of the pipeline.
const UndoLease = "undo"

// Check reports the first invariant r breaks, as an error wrapping both ErrCorrupt and
// ErrInvariant and naming it; nil when it keeps them all. key is the bucket key the record
// was read under ("" skips that rule), pipeline the step names of the definition the reader
// runs (nil: any pipeline of unique, named steps). These are what the code that reads a
// record relies on without checking again (Record.Step panics on a name outside the
// pipeline): a record that breaks one is never acted on.
func (r *Record) Check(key string, pipeline []string) error {
	if err := r.check(key, pipeline); err != nil {
		return fmt.Errorf("%w: %w: %s", ErrCorrupt, ErrInvariant, err)
	}
	return nil
}

// invariantError is the sentence of a broken invariant; Check wraps it.
type invariantError string

func (e invariantError) Error() string { return string(e) }

func broken(format string, args ...any) error { return invariantError(fmt.Sprintf(format, args...)) }

func (r *Record) check(key string, pipeline []string) error {
	if key != "" && r.RunID != key {
		return broken("run_id %q is not the key %q", r.RunID, key)
	}
	if len(r.Pipeline) == 0 {
		return broken("the pipeline is empty")
	}
	if pipeline != nil && !slices.Equal(r.Pipeline, pipeline) {
		return broken("the pipeline %q is not the definition's %q", r.Pipeline, pipeline)
	}
	for i, name := range r.Pipeline {
		if name == "" {
			return broken("step %d of the pipeline has no name", i)
		}
		if slices.Index(r.Pipeline, name) != i {
			return broken("step %q appears twice in the pipeline", name)
		}
		if r.Steps[name] == nil {
			return broken("step %q of the pipeline has no entry", name)
		}
	}
	if len(r.Steps) != len(r.Pipeline) {
		for name := range r.Steps {
			if r.Index(name) < 0 {
				return broken("steps has an entry %q outside the pipeline", name)
			}
		}
	}
	if r.After != nil {
		if len(r.After) != len(r.Pipeline) {
			return broken("after lists %d steps, the pipeline has %d", len(r.After), len(r.Pipeline))
		}
		for i, name := range r.Pipeline {
			deps, ok := r.After[name]
			if !ok {
				return broken("after has no entry for step %q", name)
			}
			for _, dep := range deps {
				if j := r.Index(dep); j < 0 || j >= i {
					return broken("step %q waits for %q, which is not a step before it in the pipeline", name, dep)
				}
			}
		}
	}
	if !knownStatus(r.Status) {
		return broken("unknown run status %q", r.Status)
	}
	for _, name := range r.Pipeline {
		s := r.Steps[name]
		switch s.Status {
		case Pending, InProgress, Verified, Failed:
		default:
			return broken("step %q has an unknown status %q", name, s.Status)
		}
	}
	if r.Status == WaitingApproval && r.Approval == nil {
		return broken("the run waits for approval and has no approval")
	}
	if a := r.Approval; a != nil && r.Index(a.Step) < 0 {
		return broken("the approval's step %q is not in the pipeline", a.Step)
	}
	if l := r.Lease; l != nil && l.Step != UndoLease && r.Index(l.Step) < 0 {
		return broken("the lease's step %q is not in the pipeline", l.Step)
	}
	if u := r.Undo; u != nil {
		if u.Cursor < 0 || u.Reversed < 0 || u.Total < 0 {
			return broken("the undo counts %d, %d, %d are negative", u.Cursor, u.Reversed, u.Total)
		}
		if u.PreviousStatus != "" && !knownStatus(u.PreviousStatus) {
			return broken("the undo's previous status %q is unknown", u.PreviousStatus)
		}
	}
	if r.Generation < 0 || r.Restarts < 0 {
		return broken("generation %d or restarts %d is negative", r.Generation, r.Restarts)
	}
	return nil
}

func knownStatus(s Status) bool {
	switch s {
	case Running, WaitingApproval, Finishing, HandedOver, Done, Undoing, Undone, Cancelled:
		return true
	}
	return false
}
