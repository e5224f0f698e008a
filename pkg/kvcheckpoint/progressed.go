package kvcheckpoint

import (
	"bytes"
	"maps"
	"slices"
	"time"
)

// Progressed reports whether after is progress over before: whether it differs in anything
// but the time of the write (updated_at, progressed_at), the revision it was written over
// (prev), the sum and the lease's write_id.
// A lease renewal, or a write that sets again what the record already says (a supervisor
// publishing a step's event again with the same next_action), is not progress; a step's
// commit or verdict, a status change, a lease taken or released, a command waiting or
// carried out, a parked item or a counter are. The store sets progressed_at by this rule on
// every write, and the supervisor's stall timeouts judge a run by it.
func Progressed(before, after *Record) bool {
	if before == nil || after == nil {
		return before != after
	}
	return !sameProgress(before, after)
}

// sameProgress compares field by field (a reflect.DeepEqual of the record costs as much as
// encoding it, on every write); TestProgressedSeesEveryField fails when a field is added
// to the record and not here.
func sameProgress(x, y *Record) bool {
	return x.Schema == y.Schema && x.RunID == y.RunID && x.Params.Equal(y.Params) && x.CreatedAt == y.CreatedAt &&
		x.Epoch == y.Epoch && x.Status == y.Status && slices.Equal(x.Pipeline, y.Pipeline) &&
		maps.EqualFunc(x.After, y.After, slices.Equal) && (x.After == nil) == (y.After == nil) &&
		maps.EqualFunc(x.Steps, y.Steps, sameStep) && eqPtr(x.SourceFingerprint, y.SourceFingerprint) &&
		sameOutput(x.Snapshot, y.Snapshot) && sameLease(x.Lease, y.Lease) && x.NextAction == y.NextAction &&
		x.Restarts == y.Restarts && x.Generation == y.Generation && slices.Equal(x.Requests, y.Requests) &&
		sameApproval(x.Approval, y.Approval) && eqPtr(x.Handover, y.Handover) && sameUndo(x.Undo, y.Undo) &&
		slices.EqualFunc(x.Commands, y.Commands, sameCommand) && eqPtr(x.Progress, y.Progress)
}

func sameStep(x, y *Step) bool {
	if x == nil || y == nil {
		return x == y
	}
	return x.Status == y.Status && x.Attempts == y.Attempts && eqPtr(x.StartedAt, y.StartedAt) &&
		eqPtr(x.FinishedAt, y.FinishedAt) && sameOutput(x.Output, y.Output) && eqPtr(x.InputFingerprint, y.InputFingerprint) &&
		eqPtr(x.Versions.Code, y.Versions.Code) && eqPtr(x.Versions.Prompt, y.Versions.Prompt) &&
		eqPtr(x.Versions.Schema, y.Versions.Schema) && eqPtr(x.Versions.Model, y.Versions.Model) &&
		eqPtr(x.Token, y.Token) && eqPtr(x.Effects, y.Effects) && slices.Equal(x.Parked, y.Parked) &&
		x.ParkedCount == y.ParkedCount && sameOutput(x.ParkedArtifact, y.ParkedArtifact) && eqPtr(x.LastError, y.LastError)
}

func sameOutput(x, y *Output) bool {
	if x == nil || y == nil {
		return x == y
	}
	return x.Object == y.Object && bytes.Equal(x.Inline, y.Inline) && x.Digest == y.Digest && x.Size == y.Size
}

// sameLease: the write_id is left out, a renewal's fresh one.
func sameLease(x, y *Lease) bool {
	if x == nil || y == nil {
		return x == y
	}
	return x.Owner == y.Owner && x.OwnerInbox == y.OwnerInbox && x.Token == y.Token && x.Step == y.Step
}

func sameApproval(x, y *Approval) bool {
	if x == nil || y == nil {
		return x == y
	}
	return x.Step == y.Step && x.PlanDigest == y.PlanDigest && x.Since == y.Since && eqPtr(x.By, y.By) && eqPtr(x.At, y.At) && eqPtr(x.Sig, y.Sig)
}

func sameUndo(x, y *Undo) bool {
	if x == nil || y == nil {
		return x == y
	}
	return x.RequestID == y.RequestID && bytes.Equal(x.Scope, y.Scope) && x.Cursor == y.Cursor &&
		x.Reversed == y.Reversed && x.Total == y.Total && x.PreviousStatus == y.PreviousStatus
}

func sameCommand(x, y Command) bool {
	return x.Verb == y.Verb && x.RequestID == y.RequestID && x.By == y.By && x.At == y.At && bytes.Equal(x.Args, y.Args)
}

func eqPtr[T comparable](x, y *T) bool {
	if x == nil || y == nil {
		return x == y
	}
	return *x == *y
}

// stamp marks r, about to be written over prev at revision over (nil and 0 for a run's first
// write): the revision it is written over (history.go), the current schema (a record read in an earlier one was upgraded in memory), the time of the write,
// progressed_at when the write is progress (Progressed), and approval.since when the write
// begins an approval's wait (an approval without a since).
func (s *Store) stamp(prev, r *Record, over uint64) {
	r.Prev = over // the compare-and-set's revision, which the server keeps (history.go)
	now := s.now().UTC().Format(time.RFC3339Nano)
	r.Schema = Schema
	r.UpdatedAt = now
	if prev == nil || Progressed(prev, r) {
		r.ProgressedAt = now
	}
	if a := r.Approval; a != nil && a.Since == "" {
		a.Since = now
	}
}
