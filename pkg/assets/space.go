package assets

import (
	"fmt"
	"regexp"
	"strings"
)

// Space is one pipeline's share of a NATS account: the names of its streams, buckets and
// subjects. Every pipeline hosted on an account has its own, so several share one NATS
// without meeting: their durables live on their own streams, their run ids and keys in
// their own buckets, and the permissions of deploy/ can give each pipeline's services only
// the subjects under its root.
//
// The zero Space, Default, is the reference night's: the names of DESIGN.md (CAIRN_RUNS,
// cairn-runs, cairn.runs.start, cairn.step.<step>.<run_id>), which the constants of this
// package spell. Another pipeline's space carries its name: CAIRN_ENRICH_RUNS,
// cairn-enrich-runs, cairn.enrich.runs.start, cairn.enrich.step.<step>.<run_id>.
type Space struct{ name string }

// Default is the reference night's space, the zero Space.
var Default Space

// spaceName is what a space's name may be: it becomes a subject token, part of a stream's
// name and of a bucket's, whose characters it must suit; no hyphen, so that no two names
// make one bucket name (cairn-a-b-runs).
var spaceName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

// SpaceOf is the space of the pipeline called name, or an error naming what is wrong with
// the name: its shape, or what it would clash with (a reserved name, ErrReservedName).
func SpaceOf(name string) (Space, error) {
	if !spaceName.MatchString(name) {
		return Space{}, fmt.Errorf("pipeline name %q: a pipeline's space takes its name, which must match %s (a letter, then up to 31 lower-case letters, digits or _)", name, spaceName)
	}
	if err := reservedError(name); err != nil {
		return Space{}, err
	}
	return Space{name: name}, nil
}

// MustSpace is SpaceOf for a name known to be valid; it panics on an invalid one.
func MustSpace(name string) Space {
	s, err := SpaceOf(name)
	if err != nil {
		panic(err)
	}
	return s
}

// Name is the space's name; "" for Default.
func (s Space) Name() string { return s.name }

// IsDefault says whether s is the reference night's space.
func (s Space) IsDefault() bool { return s.name == "" }

func (s Space) String() string {
	if s.name == "" {
		return "the default space"
	}
	return "space " + s.name
}

// Stream is the space's stream of base, one of the Stream constants: CAIRN_RUNS in Default,
// CAIRN_ENRICH_RUNS in enrich's.
func (s Space) Stream(base string) string {
	if s.name == "" {
		return base
	}
	return "CAIRN_" + strings.ToUpper(s.name) + strings.TrimPrefix(base, "CAIRN")
}

// Bucket is the space's bucket (or object store) of base, one of the Bucket constants:
// cairn-runs in Default, cairn-enrich-runs in enrich's.
func (s Space) Bucket(base string) string {
	if s.name == "" {
		return base
	}
	return "cairn-" + s.name + strings.TrimPrefix(base, "cairn")
}

// RunArg is how the operator's CLI names run runID of this space: the run id, with
// --pipeline NAME outside the default space (cairn resume RUN --pipeline NAME).
func (s Space) RunArg(runID string) string {
	if s.name == "" {
		return runID
	}
	return runID + " --pipeline " + s.name
}

// Root is the first tokens of every subject of the space: "cairn." or "cairn.enrich.".
func (s Space) Root() string {
	if s.name == "" {
		return "cairn."
	}
	return "cairn." + s.name + "."
}

// RunStart is the subject of the start command: cairn.runs.start, cairn.enrich.runs.start.
func (s Space) RunStart() string { return s.Root() + "runs.start" }

// RunsPrefix is the root of the run commands' subjects: cairn.runs. (then <run_id>.<verb>).
func (s Space) RunsPrefix() string { return s.Root() + "runs." }

// Run is a run command's subject: <root>runs.<run_id>.<verb>.
func (s Space) Run(runID, verb string) string { return s.RunsPrefix() + runID + "." + verb }

// StepPrefix is the root of the step messages' subjects: cairn.step. (then <step>.<run_id>).
func (s Space) StepPrefix() string { return s.Root() + "step." }

// Step is a step message's subject: <root>step.<step>.<run_id>.
func (s Space) Step(step, runID string) string { return s.StepPrefix() + step + "." + runID }

// Audit is a run's timeline subject: <root>audit.<run_id>.
func (s Space) Audit(runID string) string { return s.Root() + "audit." + runID }

// Saga is a step's saga subject: <root>saga.<run_id>.<step>.
func (s Space) Saga(runID, step string) string { return s.Root() + "saga." + runID + "." + step }

// Outbox is an outbox message's subject: <root>outbox.<run_id>.<kind>.
func (s Space) Outbox(runID, kind string) string { return s.Root() + "outbox." + runID + "." + kind }

// MaxDeliveries is where the server announces that a durable of the space's stream of base
// (a Stream constant) reached its delivery limit with a message.
func (s Space) MaxDeliveries(base string) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + s.Stream(base) + ".*"
}

// Rejected is the subject of refused input: <root>rejected.
func (s Space) Rejected() string { return s.Root() + "rejected" }
