package kvcheckpoint

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cairnhq/cairn/pkg/identity"
)

// Changed says whether service by may have made next out of prev, the record it was written
// over: one link of a run's history, judged field by field (Allowed judges a record alone,
// as it stands). The supervisor may change anything. Every other writer only its own part:
//
//   - what the run is (run_id, params, created_at, epoch, pipeline, after, generation) and
//     its waiting commands: only the supervisor (the compensator may add an undo that waits
//     for the run's lease and take away the undo it carries out, and touches no other);
//   - a step's work (status, output, input fingerprint, versions, token): only the service
//     of that step (an output moved to the artifact store under the same digest and size is
//     the same output);
//   - the approval: only the supervisor (applying a signed approve); a step's service may
//     only begin a wait on its own step's plan;
//   - the status: a step's service may take a running run to waiting_approval, finishing or
//     handed_over, and a finishing run to done (it settles a run whose messages are sent); the compensator only to cancelled, undoing, undone, handed_over or, after
//     a partial undo, back to what the run was; the outbox sender a finishing run to done;
//   - a lease: a step's service takes one only on a running run, for its own step, and takes
//     over only its own step's;
//   - the undo's progress: only the compensator.
//
// A link that breaks a rule is ErrForged (identity.ErrNotAllowed): the supervisor, which sees
// every link of every run, hands the run over and puts the last good record back.
func (ro Roles) Changed(prev, next *Record, by string) error {
	if by == ro.Supervisor || prev == nil || next == nil {
		return nil
	}
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%w: %w: %s changed %s", ErrForged, identity.ErrNotAllowed, by, fmt.Sprintf(format, args...))
	}
	own := func(step string) bool { return step != "" && ro.step(step) == by }
	switch {
	case prev.RunID != next.RunID, !prev.Params.Equal(next.Params), prev.CreatedAt != next.CreatedAt, prev.Epoch != next.Epoch:
		return refuse("what the run is (run_id, params, created_at, epoch)")
	case !slices.Equal(prev.Pipeline, next.Pipeline) || !maps.EqualFunc(prev.After, next.After, slices.Equal) || (prev.After == nil) != (next.After == nil):
		return refuse("the run's steps (pipeline, after)")
	case prev.Generation != next.Generation:
		return refuse("the generation (%d to %d)", prev.Generation, next.Generation)
	case !slices.EqualFunc(prev.Commands, next.Commands, sameCommand) && !(by == ro.Compensator && sameBut("undo", prev.Commands, next.Commands)):
		return refuse("the waiting commands (%s to %s)", named(prev.Commands), named(next.Commands))
	case !sameUndo(prev.Undo, next.Undo) && by != ro.Compensator:
		return refuse("the undo's progress")
	}
	for _, s := range next.Pipeline {
		if !own(s) && !sameWork(prev.Step(s), next.Step(s)) {
			return refuse("step %s's work (%s to %s)", s, prev.Step(s).Status, next.Step(s).Status)
		}
	}
	if !sameApproval(prev.Approval, next.Approval) {
		a := next.Approval
		if a == nil || !own(a.Step) || a.By != nil || a.At != nil || a.Sig != nil || prev.Status != Running {
			return refuse("the approval")
		}
	}
	if prev.Status != next.Status && !ro.mayMove(by, prev, next) {
		return refuse("the status (%s to %s)", prev.Status, next.Status)
	}
	if l := next.Lease; l != nil && !sameLease(prev.Lease, l) {
		if by == ro.Compensator && l.Step == "undo" {
			return nil
		}
		if !own(l.Step) || prev.Status != Running || (prev.Lease != nil && prev.Lease.Step != l.Step) {
			return refuse("the lease (to %s for %s)", l.Owner, l.Step)
		}
	}
	return nil
}

// mayMove says whether by, not the supervisor, may take a run from prev's status to next's:
// the compensator back to what the run was before a partial undo too.
func (ro Roles) mayMove(by string, prev, next *Record) bool {
	from, to := prev.Status, next.Status
	switch by {
	case ro.Compensator:
		return to == Cancelled || to == Undoing || to == Undone || to == HandedOver ||
			(prev.Undo != nil && to == prev.Undo.PreviousStatus)
	case ro.Outbox:
		return (from == Finishing || from == Done) && to == Done
	}
	return from == Running && (to == WaitingApproval || to == Finishing || to == HandedOver) ||
		from == Finishing && to == Done // the last step settles its run when it queued nothing left to send (supervisor.Settle)
}

// sameBut: x and y hold the same commands, in the same order, but for those of verb.
func sameBut(verb string, x, y []Command) bool {
	of := func(c Command) bool { return c.Verb == verb }
	return slices.EqualFunc(slices.DeleteFunc(slices.Clone(x), of), slices.DeleteFunc(slices.Clone(y), of), sameCommand)
}

// sameWork compares what a step made, which only its own service changes: its status, its
// output (by digest and size: inline or moved to an object), the input it read, the versions
// that made it and the token it committed under. Its notes (attempts, errors, parked items,
// effects' counts) are left out: others' writes may cut them to fit (Fit).
func sameWork(x, y *Step) bool {
	if x == nil || y == nil {
		return x == y
	}
	return x.Status == y.Status && sameDigest(x.Output, y.Output) && eqPtr(x.InputFingerprint, y.InputFingerprint) &&
		eqPtr(x.Versions.Code, y.Versions.Code) && eqPtr(x.Versions.Prompt, y.Versions.Prompt) &&
		eqPtr(x.Versions.Schema, y.Versions.Schema) && eqPtr(x.Versions.Model, y.Versions.Model) && eqPtr(x.Token, y.Token)
}

func sameDigest(x, y *Output) bool {
	if x == nil || y == nil {
		return x == y
	}
	return x.Digest == y.Digest && x.Size == y.Size
}

// Changed is Roles.Changed with the store's roles, for the signer of next (unsigned: no
// check; a ring refuses those on its own).
func (s *Store) Changed(prev, next *Record) error {
	if next == nil || next.Sig == nil {
		return nil
	}
	if err := s.roles.Changed(prev, next, next.Sig.By); err != nil {
		return fmt.Errorf("checkpoint %q: %w: %w", next.RunID, ErrCorrupt, err)
	}
	return nil
}

// named lists commands by verb and request id, for a refusal.
func named(cs []Command) string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Verb + " " + c.RequestID
	}
	return "[" + strings.Join(out, ", ") + "]"
}
