package events

import (
	"fmt"
	"strings"

	"github.com/cairnhq/cairn/pkg/assets"
)

// Subjects of the start command and of refused input, in the default space (the reference
// night's); another pipeline's are its assets.Space's.
var (
	RunStartSubject = assets.Default.RunStart()
	RejectedSubject = assets.Default.Rejected()
)

// The builders below do not validate their arguments: ids reach them after
// [ValidID] (a dot or a star in an id would change the subject's shape). Each is the
// default space's; assets.Space has every pipeline's.

// StepSubject is cairn.step.<step>.<run_id>.
func StepSubject(step, runID string) string { return assets.Default.Step(step, runID) }

// RunSubject is cairn.runs.<run_id>.<verb>.
func RunSubject(runID, verb string) string { return assets.Default.Run(runID, verb) }

// AuditSubject is cairn.audit.<run_id>.
func AuditSubject(runID string) string { return assets.Default.Audit(runID) }

// SagaSubject is cairn.saga.<run_id>.<step>.
func SagaSubject(runID, step string) string { return assets.Default.Saga(runID, step) }

// OutboxSubject is cairn.outbox.<run_id>.<kind>.
func OutboxSubject(runID, kind string) string { return assets.Default.Outbox(runID, kind) }

// ParseRunSubject splits sp's start subject (cairn.runs.start) into ("", "start") and
// <root>runs.<run_id>.<verb> into (run_id, verb). Any other shape, an unknown verb or a
// bad run id is an error naming the subject and wrapping [ErrInvalid].
func ParseRunSubject(sp assets.Space, subject string) (runID, verb string, err error) {
	if subject == sp.RunStart() {
		return "", VerbStart, nil
	}
	rest, ok := strings.CutPrefix(subject, sp.RunsPrefix())
	runID, verb, two := strings.Cut(rest, ".")
	if !ok || !two || strings.Contains(verb, ".") {
		return "", "", fmt.Errorf("%w: subject %q is neither %s nor %s<run_id>.<verb>", ErrInvalid, subject, sp.RunStart(), sp.RunsPrefix())
	}
	if _, known := CommandType(verb); !known || verb == VerbStart {
		return "", "", fmt.Errorf("%w: subject %q has unknown verb %q", ErrInvalid, subject, verb)
	}
	if err := ValidID("run id", runID); err != nil {
		return "", "", fmt.Errorf("%w: subject %q: %w", ErrInvalid, subject, err)
	}
	return runID, verb, nil
}
