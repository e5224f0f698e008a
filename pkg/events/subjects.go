package events

import (
	"fmt"
	"strings"
)

// Subjects of the start command and of refused input.
const (
	RunStartSubject = "cairn.runs.start"
	RejectedSubject = "cairn.rejected"
)

const runsPrefix = "cairn.runs."

// The builders below do not validate their arguments: ids reach them after
// [ValidID] (a dot or a star in an id would change the subject's shape).

// StepSubject is cairn.step.<step>.<run_id>.
func StepSubject(step, runID string) string { return "cairn.step." + step + "." + runID }

// RunSubject is cairn.runs.<run_id>.<verb>.
func RunSubject(runID, verb string) string { return runsPrefix + runID + "." + verb }

// AuditSubject is cairn.audit.<run_id>.
func AuditSubject(runID string) string { return "cairn.audit." + runID }

// SagaSubject is cairn.saga.<run_id>.<step>.
func SagaSubject(runID, step string) string { return "cairn.saga." + runID + "." + step }

// OutboxSubject is cairn.outbox.<run_id>.<kind>.
func OutboxSubject(runID, kind string) string { return "cairn.outbox." + runID + "." + kind }

// ParseRunSubject splits cairn.runs.start into ("", "start") and
// cairn.runs.<run_id>.<verb> into (run_id, verb). Any other shape, an
// unknown verb or a bad run id is an error naming the subject and wrapping
// [ErrInvalid].
func ParseRunSubject(subject string) (runID, verb string, err error) {
	if subject == RunStartSubject {
		return "", VerbStart, nil
	}
	rest, ok := strings.CutPrefix(subject, runsPrefix)
	runID, verb, two := strings.Cut(rest, ".")
	if !ok || !two || strings.Contains(verb, ".") {
		return "", "", fmt.Errorf("%w: subject %q is neither %s nor %s<run_id>.<verb>", ErrInvalid, subject, RunStartSubject, runsPrefix)
	}
	if _, known := CommandType(verb); !known || verb == VerbStart {
		return "", "", fmt.Errorf("%w: subject %q has unknown verb %q", ErrInvalid, subject, verb)
	}
	if err := ValidID("run id", runID); err != nil {
		return "", "", fmt.Errorf("%w: subject %q: %w", ErrInvalid, subject, err)
	}
	return runID, verb, nil
}
