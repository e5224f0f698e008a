package events

// Types: io.cairn.<noun>.<verb>.v1. A new version of a payload gets a new
// type (io.cairn.<noun>.<verb>.v2); a consumer refuses types it does not know.
const (
	TypeRunStart   = "io.cairn.run.start.v1"
	TypeRunResume  = "io.cairn.run.resume.v1"
	TypeRunApprove = "io.cairn.run.approve.v1"
	TypeRunReject  = "io.cairn.run.reject.v1"
	TypeRunCancel  = "io.cairn.run.cancel.v1"
	TypeRunRerun   = "io.cairn.run.rerun.v1"
	TypeRunUndo    = "io.cairn.run.undo.v1"
	TypeStepReady  = "io.cairn.step.ready.v1"
	TypeAudit      = "io.cairn.audit.recorded.v1"
	TypeOutbox     = "io.cairn.outbox.queued.v1"
	TypeRejected   = "io.cairn.input.rejected.v1"
	TypeSaga       = "io.cairn.saga.recorded.v1"
)

// Verbs are the last token of a cairn.runs subject.
const (
	VerbStart   = "start"
	VerbResume  = "resume"
	VerbApprove = "approve"
	VerbReject  = "reject"
	VerbCancel  = "cancel"
	VerbRerun   = "rerun"
	VerbUndo    = "undo"
)

// ContentType is the datacontenttype of every Cairn event.
const ContentType = "application/json"

// knownType reports whether typ is one of the Type constants.
func knownType(typ string) bool {
	switch typ {
	case TypeRunStart, TypeRunResume, TypeRunApprove, TypeRunReject, TypeRunCancel,
		TypeRunRerun, TypeRunUndo, TypeStepReady, TypeAudit, TypeOutbox, TypeRejected, TypeSaga:
		return true
	}
	return false
}

// CommandType returns the event type of a run command verb ("approve" ->
// [TypeRunApprove]) and false for anything else.
func CommandType(verb string) (string, bool) {
	switch verb {
	case VerbStart:
		return TypeRunStart, true
	case VerbResume:
		return TypeRunResume, true
	case VerbApprove:
		return TypeRunApprove, true
	case VerbReject:
		return TypeRunReject, true
	case VerbCancel:
		return TypeRunCancel, true
	case VerbRerun:
		return TypeRunRerun, true
	case VerbUndo:
		return TypeRunUndo, true
	}
	return "", false
}
