package pipeline

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Kind is what a step does to the world; it decides the step's recovery rule.
type Kind string

// Step kinds.
const (
	SourceRead     Kind = "source read"
	ModelCall      Kind = "model call"
	Compute        Kind = "compute"
	SnapshotRead   Kind = "snapshot read"
	BusinessWrite  Kind = "business write"
	OutsideMessage Kind = "outside message"
)

// Step is one step of a pipeline.
//
// The fields after Recovery describe how the step survives faults, for `cairn faultmap`
// (package faultmap): they are read by people and by the map's rules, never by the runner.
// Text fields are short phrases; empty means none.
type Step struct {
	Name string
	Kind Kind
	// After names the steps this one waits for: it runs once all of them are verified, at
	// the same time as any other step whose own are (fan-out), and a step after several
	// waits for the last of them (join). Each must be declared before it, so the order of
	// Steps is an order the steps can run in. Nil: the step declared before it (none for
	// the first), so a pipeline that names no After runs its steps one after another;
	// empty: none, the step starts with the run.
	After        []string
	Leased       bool   // takes the run's lease (false: lease-free commit)
	Fenced       bool   // writes to fenced outside systems
	Irreversible bool   // its effects cannot be reversed, only answered (a sent message)
	Recovery     string // the recovery rule, in a sentence

	// Checkpoint is what the step's commit saves, so that a restart after it does not
	// redo it ("the snapshot and the totals"); empty: nothing is saved.
	Checkpoint string
	// Effects are what the step does outside Cairn ("rows of the accounts", "mail", "model call");
	// empty: nothing (reads and Cairn's own buckets and streams do not count).
	Effects string
	// Key is how its outside writes are made safe to repeat: the idempotency key and who
	// enforces it ("<run>:<record>, the table's primary key; fenced");
	// empty: no key. A model call takes no key: Memo stands in for it. Whoever enforces a
	// key takes the same payload again as a harmless repeat and refuses another with
	// idempotency.ErrConflict, which hands the run over.
	Key string
	// Memo is, for a model call, where answers are saved and under which key, so that an
	// item answered once is never asked again; empty: not memoised.
	Memo string
	// Compensation is how an undo answers the step's effects ("reversal entry <key>:rev");
	// empty: none.
	Compensation string
	// ItemRetries: each item's outside call is retried in process (Attempt.Retry,
	// CAIRN_RETRY_ATTEMPTS tries) before the attempt fails.
	ItemRetries bool
	// RateLimit names the setting that declares the outside system's calls per second
	// ("CAIRN_MODEL_RPS"); empty: none declared.
	RateLimit string
	// ChecksSource: the step checks the run's source for drift (its implementation is a
	// runner.SourceChecker) whenever the run continues after a break, before it runs. The
	// runner refuses a step whose implementation says otherwise, and checks only such steps.
	ChecksSource bool
}

// HasEffects reports whether the step acts outside Cairn: it names effects, or declares
// them irreversible.
func (s Step) HasEffects() bool { return s.Effects != "" || s.Irreversible }

// Writes reports whether the step writes to an outside system: it has effects and is not
// a model call (a call that changes nothing outside, though it costs).
func (s Step) Writes() bool { return s.HasEffects() && s.Kind != ModelCall }

// SourceRead reports whether the step reads the run's source, whose fingerprint the
// steps that check the source compare with.
func (s Step) SourceRead() bool { return s.Kind == SourceRead }

// ReversibleWrites reports whether the step writes to an outside system and an undo can
// reverse what it wrote.
func (s Step) ReversibleWrites() bool { return s.Writes() && !s.Irreversible }

// Definition is a pipeline.
type Definition struct {
	Name  string
	Steps []Step
	// Input names the members of a run's params, in order: the pipeline's input, which is
	// what makes two runs the same (their natural key, with whether each is a shadow run),
	// and the order its members are read in (a step's input fingerprint, the key's text).
	// Members a start carries beyond it follow, sorted.
	Input []string
	// CheckInput validates a start's members, the pipeline's input (all but request_id,
	// run_id and shadow), before anything is made of it: its error is the start's
	// rejection reason. Nil takes any members.
	CheckInput func(input map[string]json.RawMessage) error
	// RunID names a run started without a run_id, from its input; nil: DefaultRunID's.
	RunID func(input map[string]json.RawMessage) string
	// NaturalKey says, for a person, what makes two starts the same input (the natural
	// key the supervisor claims in cairn-natural-keys: a second start of it is refused
	// naming the first run); empty: none, so two starts of one input are two runs.
	NaturalKey string
}

// DefaultRunID is the run id of a start without one: the pipeline's RunID, or else "run-"
// and 16 hex of the sha256 of the input's members (names sorted, values compacted), so the
// same input always names the same run.
func (d Definition) DefaultRunID(input map[string]json.RawMessage) string {
	if d.RunID != nil {
		return d.RunID(input)
	}
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(input)) {
		var v bytes.Buffer
		if json.Compact(&v, input[k]) != nil {
			v.Write(input[k])
		}
		fmt.Fprintf(h, "%s=%s\n", k, v.Bytes())
	}
	return "run-" + hex.EncodeToString(h.Sum(nil))[:16]
}

// Names returns the step names in order.
func (d Definition) Names() []string {
	out := make([]string, len(d.Steps))
	for i, s := range d.Steps {
		out[i] = s.Name
	}
	return out
}

// Step returns the named step.
func (d Definition) Step(name string) (Step, bool) {
	i := slices.IndexFunc(d.Steps, func(s Step) bool { return s.Name == name })
	if i < 0 {
		return Step{}, false
	}
	return d.Steps[i], true
}

// Validate checks names are unique, that a fenced step takes the lease (a token fences
// only its holder's writes), that each step waits only on steps declared before it, and
// that a step taking the run's lease (one per run) never runs beside another step. A write
// that is not fenced may be lease-free: its keys make a repeat harmless.
func (d Definition) Validate() error {
	seen := map[string]bool{}
	var errs []error
	for _, s := range d.Steps {
		if seen[s.Name] {
			errs = append(errs, fmt.Errorf("step %q appears twice", s.Name))
		}
		if s.Fenced && !s.Leased {
			errs = append(errs, fmt.Errorf("step %q writes fenced systems but takes no lease", s.Name))
		}
		for j, dep := range s.After {
			switch {
			case dep == s.Name:
				errs = append(errs, fmt.Errorf("step %q waits for itself", s.Name))
			case !seen[dep]:
				errs = append(errs, fmt.Errorf("step %q waits for %q, which is not a step declared before it", s.Name, dep))
			case slices.Index(s.After, dep) != j:
				errs = append(errs, fmt.Errorf("step %q waits for %q twice", s.Name, dep))
			}
		}
		seen[s.Name] = true
	}
	if len(d.Steps) == 0 {
		errs = append(errs, errors.New("the pipeline has no steps"))
	}
	if len(errs) == 0 {
		errs = append(errs, d.checkSideBySide()...)
	}
	return errors.Join(errs...)
}

// checkSideBySide refuses a leased step that may run at the same time as another step: a run
// has one lease, and its holder alone writes the record while it holds it.
func (d Definition) checkSideBySide() []error {
	var errs []error
	for _, s := range d.Steps {
		if beside := d.Beside(s.Name); s.Leased && len(beside) > 0 {
			errs = append(errs, fmt.Errorf("step %q takes the run's lease and may run beside step %q (neither waits for the other): a step that runs beside another must be lease-free", s.Name, beside[0]))
		}
	}
	return errs
}

// Graph is what each step waits for, by step, when some step names its After; nil when
// none does: each step then waits for the one before it.
func (d Definition) Graph() map[string][]string {
	if !slices.ContainsFunc(d.Steps, func(s Step) bool { return s.After != nil }) {
		return nil
	}
	g := make(map[string][]string, len(d.Steps))
	for i, s := range d.Steps {
		switch {
		case s.After != nil:
			g[s.Name] = slices.Clone(s.After)
		case i > 0:
			g[s.Name] = []string{d.Steps[i-1].Name}
		default:
			g[s.Name] = []string{}
		}
	}
	return g
}

// Waits are the steps the named step waits for: its After, or the step declared before it.
func (d Definition) Waits(name string) []string {
	i := slices.IndexFunc(d.Steps, func(s Step) bool { return s.Name == name })
	switch {
	case i < 0:
		return nil
	case d.Steps[i].After != nil:
		return slices.Clone(d.Steps[i].After)
	case i > 0:
		return []string{d.Steps[i-1].Name}
	}
	return []string{}
}

// Beside are the steps that may run at the same time as the named one: neither waits for
// the other, directly or through others. None when the steps run one after another.
func (d Definition) Beside(name string) []string {
	g := d.Graph()
	if g == nil {
		return nil
	}
	up := ancestors(d.Names(), g)
	var out []string
	for _, o := range d.Names() {
		if o != name && !up[name][o] && !up[o][name] {
			out = append(out, o)
		}
	}
	return out
}

// ancestors is, for each step of order, the set of steps it waits for directly or through
// others; order must list every step after the ones it waits for.
func ancestors(order []string, g map[string][]string) map[string]map[string]bool {
	up := make(map[string]map[string]bool, len(order))
	for _, s := range order {
		set := map[string]bool{}
		for _, dep := range g[s] {
			set[dep] = true
			for a := range up[dep] {
				set[a] = true
			}
		}
		up[s] = set
	}
	return up
}
