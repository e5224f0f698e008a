package faultmap

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/outbox"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/ratelimit"
)

// ErrGaps is wrapped by [Map.Err] when the map has gaps.
var ErrGaps = errors.New("fault map gaps")

// Settings are what the map is drawn under: the runner's retry settings, the steps that
// wait for approval, and the declared rate limits of outside systems.
type Settings struct {
	RetryAttempts int `json:"retry_attempts"` // tries of one item in one attempt; default 3
	LoopGuard     int `json:"loop_guard"`     // failed attempts that hand the run over; default 3
	MaxDeliver    int `json:"max_deliver"`    // deliveries of one step event; default 20
	ReassignLimit int `json:"reassign_limit"` // reassignments without progress that hand the run over; default 5
	// ProgressSteps are the steps whose loop guard counts attempts without progress (their
	// implementation is a runner.ProgressCounter).
	ProgressSteps []string `json:"progress_steps"`
	ApprovalSteps []string `json:"approval_steps"` // steps that wait for a person
	// RateLimits are calls per second, by the name of the setting that declares them
	// (the names steps give in pipeline.Step.RateLimit).
	RateLimits map[string]float64 `json:"rate_limits"`
	// SharedLimits are, by the same names, the limits that keep a rate limit for every
	// instance at once (pkg/ratelimit), as the steps wait for them; a rate limit without
	// one is kept by each process alone, so N instances call N times the rate.
	SharedLimits map[string]ratelimit.Limit `json:"shared_limits"`
	// OutboxBackoff caps the outbox sender's waits (CAIRN_OUTBOX_BACKOFF); default
	// outbox.DefaultMaxBackoff.
	OutboxBackoff time.Duration `json:"outbox_backoff_ns"`
}

func (s Settings) withDefaults() Settings {
	s.RetryAttempts = cmp.Or(s.RetryAttempts, 3)
	s.LoopGuard = cmp.Or(s.LoopGuard, 3)
	s.MaxDeliver = cmp.Or(s.MaxDeliver, 20)
	s.OutboxBackoff = cmp.Or(s.OutboxBackoff, outbox.DefaultMaxBackoff)
	s.ReassignLimit = cmp.Or(s.ReassignLimit, 5)
	return s
}

func (s Settings) validate() error {
	var errs []error
	if s.RetryAttempts < 1 {
		errs = append(errs, fmt.Errorf("retry attempts must be at least 1, not %d", s.RetryAttempts))
	}
	if s.LoopGuard < 1 {
		errs = append(errs, fmt.Errorf("loop guard must be at least 1, not %d", s.LoopGuard))
	}
	if s.MaxDeliver < 2 {
		errs = append(errs, fmt.Errorf("max deliver must be at least 2, not %d", s.MaxDeliver))
	}
	for _, name := range slices.Sorted(maps.Keys(s.RateLimits)) {
		if r := s.RateLimits[name]; !(r > 0) {
			errs = append(errs, fmt.Errorf("rate limit %s must be positive, not %v", name, r))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.SharedLimits)) {
		if l, r := s.SharedLimits[name], s.RateLimits[name]; l.PerSecond != r {
			errs = append(errs, fmt.Errorf("rate limit %s is %v, its shared limit keeps %v", name, r, l.PerSecond))
		}
	}
	return errors.Join(errs...)
}

// Map is a pipeline's fault map.
type Map struct {
	Pipeline string `json:"pipeline"`
	// Twice is what happens when the job is started twice on the same input.
	Twice    string    `json:"twice"`
	Settings Settings  `json:"settings"`
	Steps    []StepMap `json:"steps"`
	Gaps     []Gap     `json:"gaps"`
	// RunsRead is how many recent runs' records Observe read (0: none were).
	RunsRead int `json:"runs_read"`
	// ChaosAt is when the chaos run that Chaos added was made; "": none was added.
	ChaosAt string `json:"chaos_at,omitempty"`
}

// StepMap is one step's line of the map: its definition, as the map reads it, with the
// retry policy's worst case and whether it waits for approval.
type StepMap struct {
	N            int           `json:"n"` // 1-based position in the pipeline
	Name         string        `json:"name"`
	After        []string      `json:"after"`  // the steps it waits for; empty for one that starts the run
	Beside       []string      `json:"beside"` // the steps that may run at the same time; empty when none
	Kind         pipeline.Kind `json:"kind"`
	Leased       bool          `json:"leased"`
	Fenced       bool          `json:"fenced"`
	Irreversible bool          `json:"irreversible"`
	Recovery     string        `json:"recovery"`
	Checkpoints  bool          `json:"checkpoints"`
	Checkpoint   string        `json:"checkpoint"`
	Effects      string        `json:"effects"`
	Key          string        `json:"key"`
	Memo         string        `json:"memo"`
	Compensation string        `json:"compensation"`
	Retry        Retry         `json:"retry"`
	Approval     bool          `json:"approval"`
	// Drift is when the step checks the run's source (pipeline.Step.ChecksSource, as the
	// runner reads it): "source" for the step that reads it, "after a break", or "".
	Drift string `json:"drift"`
	// Observed is what recent runs showed of the step (Observe); nil when none verified it.
	Observed *Observed `json:"observed"`
	// Loss is what a crash of the step loses, in a sentence: what it keeps as it goes, and
	// how long it was seen to take.
	Loss string `json:"loss"`
	// Crashes are the last chaos run's crash points at the step (Chaos).
	Crashes []Crash `json:"crashes,omitempty"`
}

// GapKind names a kind of gap.
type GapKind string

// Gap kinds (see the package documentation).
const (
	NoKey               GapKind = "no-key"
	IrreversibleFirst   GapKind = "irreversible-before-reversible"
	NoMemo              GapKind = "model-call-without-memo"
	OverRateLimit       GapKind = "retry-over-rate-limit"
	UnfencedWrite       GapKind = "unfenced-write"
	NoCompensation      GapKind = "no-compensation"
	SnapshotNotSaved    GapKind = "snapshot-not-saved"
	UnknownApprovalStep GapKind = "unknown-approval-step"
	UncheckedDrift      GapKind = "write-without-source-check"
)

// Gap is a way the pipeline can do harm under a fault: its kind, the step, and a sentence.
type Gap struct {
	Kind   GapKind `json:"kind"`
	Step   string  `json:"step"`
	Detail string  `json:"detail"`
}

// Err returns nil when the map has no gaps, else an error wrapping [ErrGaps] that names
// their count.
func (m Map) Err() error {
	if len(m.Gaps) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %d found in pipeline %s", ErrGaps, len(m.Gaps), m.Pipeline)
}

// Analyze draws the fault map of d under the settings. It fails only when the definition
// or the settings are invalid, or a step names a rate limit the settings do not give; the
// gaps are in the map.
func Analyze(d pipeline.Definition, s Settings) (Map, error) {
	s = s.withDefaults()
	if err := s.validate(); err != nil {
		return Map{}, fmt.Errorf("fault map settings: %w", err)
	}
	if err := d.Validate(); err != nil {
		return Map{}, fmt.Errorf("pipeline %s: %w", d.Name, err)
	}
	m := Map{Pipeline: d.Name, Twice: twice(d), Settings: s, Steps: make([]StepMap, len(d.Steps)), Gaps: []Gap{}}
	for i, st := range d.Steps {
		r, err := retryOf(st, s)
		if err != nil {
			return Map{}, err
		}
		m.Steps[i] = StepMap{
			N: i + 1, Name: st.Name, After: d.Waits(st.Name), Beside: orEmpty(d.Beside(st.Name)), Kind: st.Kind, Leased: st.Leased, Fenced: st.Fenced, Irreversible: st.Irreversible,
			Recovery: st.Recovery, Checkpoints: st.Checkpoint != "", Checkpoint: st.Checkpoint, Effects: st.Effects,
			Key: st.Key, Memo: st.Memo, Compensation: st.Compensation, Retry: r,
			Approval: slices.Contains(s.ApprovalSteps, st.Name), Drift: driftOf(st),
		}
		m.Steps[i].Loss = lossText(m.Steps[i])
		m.Gaps = append(m.Gaps, stepGaps(st, r, d.Steps[i+1:])...)
		if st.Writes() && !st.ChecksSource && slices.ContainsFunc(d.Steps[:i], pipeline.Step.SourceRead) {
			m.Gaps = append(m.Gaps, Gap{UncheckedDrift, st.Name, st.Name + " writes outside (" + effects(st) +
				") after the source is read but never checks it: after a resume, a restart or a reassignment it writes from documents that may have changed."})
		}
	}
	for _, name := range s.ApprovalSteps {
		if _, ok := d.Step(name); !ok {
			m.Gaps = append(m.Gaps, Gap{UnknownApprovalStep, name, fmt.Sprintf(
				"the approval steps name %q, which is no step of pipeline %s (%s): no step waits for a person there.",
				name, d.Name, strings.Join(d.Names(), ", "))})
		}
	}
	return m, nil
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// stepGaps are the gaps of step st, whose retry policy is r; later are the steps after it.
func stepGaps(st pipeline.Step, r Retry, later []pipeline.Step) []Gap {
	var gaps []Gap
	gap := func(k GapKind, format string, args ...any) {
		gaps = append(gaps, Gap{k, st.Name, st.Name + " " + fmt.Sprintf(format, args...)})
	}
	if st.Writes() && st.Key == "" {
		gap(NoKey, "has outside effects (%s) but no key: a repeat after a crash or a lost reply does them twice.", effects(st))
	}
	if st.Irreversible {
		var names []string
		for _, l := range later {
			if l.ReversibleWrites() {
				names = append(names, l.Name)
			}
		}
		if len(names) > 0 {
			gap(IrreversibleFirst, "does what cannot be undone (%s) before %s, whose writes can be: a failure there leaves a run that cannot be undone whole; move it after them.",
				effects(st), strings.Join(names, ", "))
		}
	}
	if st.Kind == pipeline.ModelCall && st.Memo == "" {
		gap(NoMemo, "calls a model without memoising its answers: a restart pays for every answer again, and may get different ones.")
	}
	if r.RateLimit != "" && float64(r.PeakPerSecond) > r.RateLimitPerSecond {
		gap(OverRateLimit, "may call one item %d times within one second (%d tries, waits %s), when every call fails at once; %s declares %g calls per second.",
			r.PeakPerSecond, r.TriesPerAttempt, durations(r.TryBackoffMS), r.RateLimit, r.RateLimitPerSecond)
	}
	if st.Kind == pipeline.BusinessWrite && !st.Fenced {
		gap(UnfencedWrite, "is a business write without a fence: a holder that lost the lease can still write after another took over.")
	}
	if st.ReversibleWrites() && st.Compensation == "" { // an irreversible step's effects are answered, not undone
		gap(NoCompensation, "has outside effects (%s) but no compensation: an undo leaves them standing, unanswered.", effects(st))
	}
	if st.Kind == pipeline.SnapshotRead && st.Checkpoint == "" {
		gap(SnapshotNotSaved, "reads a snapshot but checkpoints nothing: a restart reads again what has moved since, and the steps after it disagree.")
	}
	return gaps
}

func effects(st pipeline.Step) string {
	if st.Effects == "" {
		return "unnamed"
	}
	return st.Effects
}

// Drift points: when a step checks the run's source.
const (
	DriftSource     = "source"        // the step reads the source and records its fingerprint
	DriftAfterBreak = "after a break" // checked before the step runs when the run continues after a break
)

func driftOf(st pipeline.Step) string {
	switch {
	case st.SourceRead():
		return DriftSource
	case st.ChecksSource:
		return DriftAfterBreak
	}
	return ""
}

// twice answers "what happens if the job runs twice on the same input" from the pipeline's
// natural key.
func twice(d pipeline.Definition) string {
	if d.NaturalKey == "" {
		return "no natural key declared: two starts of the same input are two runs, each doing its effects under its own run id"
	}
	// A pipeline hosted by pkg/app has the space its name names; the reference night, whose
	// name names none, has the default space.
	sp, err := assets.SpaceOf(d.Name)
	if err != nil {
		sp = assets.Default
	}
	return "one run: the natural key (" + d.NaturalKey + ") is claimed in " + sp.Bucket(assets.BucketNaturalKeys) + " before the run's record, and a second start of it is refused on " + sp.Rejected() + " naming the first run (the same start again, same run id, is the same run); `cairn rerun RUN --from STEP` runs it again"
}
