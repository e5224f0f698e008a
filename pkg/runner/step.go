package runner

import (
	"context"
	"encoding/json"

	"github.com/cairnhq/cairn/pkg/fence"
	"github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// Step is the work of one pipeline step. Run is called with an attempt that holds the run's
// lease (for leased steps); it returns the step's result or an error whose class decides what
// happens: temporary errors fail the attempt and the message comes back later; a fenced error
// ends the attempt silently; anything else hands the run over to a person.
type Step interface {
	Run(ctx context.Context, a *Attempt) (*Result, error)
}

// Fencer is a step that writes to fenced outside systems: RaiseFences is called right after
// the lease is taken, before anything else.
type Fencer interface {
	RaiseFences(ctx context.Context, a *Attempt, t fence.Token) error
}

// Verifier checks a step's result against what it meant to do before the step is committed.
// Verify is called once the outputs are stored, with the result whose Output and Snapshot
// are the bytes stored; an error names what did not hold (which item, expected and
// found). It fails the attempt with ErrVerify: the run is handed over, the step failed and
// not verified, and no later step runs (a temporary error is retried as any other).
type Verifier interface {
	Verify(ctx context.Context, a *Attempt, r *Result) error
}

// SourceChecker checks a run's source against the fingerprint its source step recorded and
// names what changed; the runner calls it whenever the run continues after a break, before
// the step does anything (the drift rule, drift.go). A step that is one says so in its
// definition (pipeline.Step.ChecksSource).
type SourceChecker interface {
	CheckSource(ctx context.Context, a *Attempt, fingerprint string) (changed []string, err error)
}

// Planner is a step that can wait for a person (CAIRN_APPROVAL_STEPS): Plan computes exactly
// what Run will do, with no effect. The plan is stored, the run waits for approval, and Run
// runs only while a fresh Plan still has the approved plan's digest.
type Planner interface {
	Plan(ctx context.Context, a *Attempt) ([]byte, error)
}

// Versioner is a step whose output depends on versions besides the code's (a prompt, a
// schema, a model). The versions are written into the record when the lease is taken, so a
// restart under other versions is recorded as an explicit version change.
type Versioner interface {
	Versions() kvcheckpoint.Versions
}

// Result is what a finished step leaves in the checkpoint.
type Result struct {
	Output            json.RawMessage // any JSON; stored inline when small, else as an artifact
	Versions          kvcheckpoint.Versions
	InputFingerprint  string
	Effects           *kvcheckpoint.Effects
	Parked            []kvcheckpoint.Parked // every parked item; the record lists the first 20
	Items             int                   // items the step handled, for the park limit
	SourceFingerprint string                // the source step sets the run's fingerprint
	Snapshot          json.RawMessage       // a snapshot step's saved read (the record's snapshot)
	NextAction        string
	// Basis is what the step read and Verify checks the stored output against (a source
	// step's listing, as read); it is never stored.
	Basis any
}
