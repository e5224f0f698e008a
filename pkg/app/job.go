package app

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/runner"
	"github.com/cairnhq/cairn/pkg/undo"
)

// Job is a pipeline whose steps are declared and implemented in one list: what
// Config.Job takes, and RunLocal hosts.
type Job struct {
	Name  string
	Steps []Step
	// Input, CheckInput, RunID and NaturalKey are the pipeline's (pipeline.Definition).
	// Without a CheckInput, a start must carry every member of Input (not null, not "") and
	// no other, each of the type the first step reads it as (a runner.Typed's In).
	Input      []string
	CheckInput func(input map[string]json.RawMessage) error
	RunID      func(input map[string]json.RawMessage) string
	NaturalKey string
	// Systems are the reversals of the job's outside systems, by the system name its
	// effects carry (runner.Effect's Reverse.System): undo.HTTP, undo.SQL or the job's own;
	// they join Config.Systems.
	Systems map[string]undo.System
}

// Step is one step of a job: what it is (its declaration, which the runner's rules and the
// fault map read) and what it does (Do). Make one with Read, Call, Compute, Write or
// Message, which declare its kind and what its implementation does besides Run (raising
// fences, checking the source); set the declaration's other fields on what they return.
type Step struct {
	pipeline.Step
	Do runner.Step
}

// Read is a step that reads the run's source (pipeline.SourceRead): cheap to repeat, so a
// restart reads again. Its output is what the later steps work from; do tells the source's
// fingerprint (runner.Attempt.Fingerprint) for the steps that check the source later.
func Read(name string, do runner.Step) Step { return step(name, pipeline.SourceRead, do) }

// Call is a step that calls a paid or slow outside service for answers, and changes
// nothing outside (pipeline.ModelCall): its answers are memoised (runner.Memo,
// runner.Attempt.Memo), so a restart never pays for an answer twice. It runs lease-free.
func Call(name string, do runner.Step) Step { return step(name, pipeline.ModelCall, do) }

// Compute is a step that computes from earlier outputs alone (pipeline.Compute): a restart
// computes again.
func Compute(name string, do runner.Step) Step { return step(name, pipeline.Compute, do) }

// Write is a step that writes to an outside system (pipeline.BusinessWrite): it takes the
// run's lease; each write is keyed (runner.Attempt.Keyed) so that the outside system takes
// a repeat as harmless; it verifies what it wrote (its implementation is a verifier), and
// when its implementation raises fences it is declared fenced.
func Write(name string, do runner.Step) Step { return step(name, pipeline.BusinessWrite, do) }

// Message is a step that sends messages (pipeline.OutsideMessage) through the pipeline's
// outbox (runner.Attempt.Queue), each once: what went out stays out (Irreversible), unless
// it is queued withdrawable. It takes the run's lease.
func Message(name string, do runner.Step) Step { return step(name, pipeline.OutsideMessage, do) }

func step(name string, kind pipeline.Kind, do runner.Step) Step {
	ab := runner.AbilitiesOf(do)
	s := pipeline.Step{Name: name, Kind: kind, Fenced: ab.Fences, ChecksSource: ab.ChecksSource}
	switch kind {
	case pipeline.SourceRead:
		s.Recovery = "read again: cheap to repeat"
	case pipeline.ModelCall:
		s.Recovery = "each answer memoised: an item answered once is never asked again"
		s.Effects = "paid calls"
		s.ItemRetries = true
	case pipeline.Compute:
		s.Recovery = "computed again from the saved outputs"
	case pipeline.BusinessWrite:
		s.Leased = true
		s.Recovery = "keys enforced by the outside system: a repeat is harmless"
		s.Effects = "writes to an outside system"
		s.ItemRetries = true
	case pipeline.OutsideMessage:
		s.Leased = true
		s.Irreversible = true
		s.Recovery = "each message queued under its key and sent once by the outbox"
		s.Effects = "messages"
	}
	s.Leased = s.Leased || s.Fenced
	return Step{Step: s, Do: do}
}

// After is the step waiting for the named steps (pipeline.Step.After): it runs once all
// of them are verified, beside any other step whose own are. With none, it starts with
// the run.
func (s Step) After(steps ...string) Step {
	s.Step.After = append([]string{}, steps...)
	return s
}

// Pipeline is the job's definition: its steps' declarations, each with what the runner
// requires of its kind filled in where the step leaves it empty (where a model call's
// answers are memoised, the keys of a write), and a write's compensation when the job
// registers systems that reverse effects.
func (j Job) Pipeline() pipeline.Definition {
	d := pipeline.Definition{Name: j.Name, Input: j.Input, CheckInput: j.CheckInput, RunID: j.RunID, NaturalKey: j.NaturalKey,
		Steps: make([]pipeline.Step, len(j.Steps))}
	memo := "the job's memo bucket"
	if sp, err := assets.SpaceOf(j.Name); err == nil {
		memo = sp.Bucket(assets.BucketMemo)
	}
	if d.CheckInput == nil && len(j.Input) > 0 {
		d.CheckInput = j.checkMembers
	}
	for i, s := range j.Steps {
		st := s.Step
		if st.Kind == pipeline.ModelCall {
			st.Memo = cmp.Or(st.Memo, memo+", key <run>.<the key given to runner.Memo>, read before the call, saved with Create")
		}
		if st.Writes() {
			st.Key = cmp.Or(st.Key, "the keys given to runner.Attempt.Keyed, each enforced by the outside system")
		}
		if st.ReversibleWrites() && st.Compensation == "" && len(j.Systems) > 0 {
			st.Compensation = "each effect reversed, newest first, through the system its intent names (the job's: " +
				strings.Join(slices.Sorted(maps.Keys(j.Systems)), ", ") + ")"
		}
		d.Steps[i] = st
	}
	return d
}

// checkMembers is a Job's CheckInput when it names none: every member of Input, and no
// other, in the type the first step reads it as.
func (j Job) checkMembers(input map[string]json.RawMessage) error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(input)) {
		if !slices.Contains(j.Input, name) {
			errs = append(errs, fmt.Errorf("unknown member %q (the job takes %s)", name, strings.Join(j.Input, ", ")))
		}
	}
	for _, name := range j.Input {
		if v := strings.TrimSpace(string(input[name])); v == "" || v == "null" || v == `""` {
			errs = append(errs, fmt.Errorf("%q is missing", name))
		}
	}
	if len(errs) == 0 && len(j.Steps) > 0 {
		if c, ok := j.Steps[0].Do.(interface {
			CheckInput(map[string]json.RawMessage) error
		}); ok {
			errs = append(errs, c.CheckInput(input))
		}
	}
	return errors.Join(errs...)
}

// implementations are the job's steps' implementations, by step name.
func (j Job) implementations() map[string]runner.Step {
	m := make(map[string]runner.Step, len(j.Steps))
	for _, s := range j.Steps {
		m[s.Name] = s.Do
	}
	return m
}

// withJob is c with the pipeline and steps of its Job, when it has one, and the Job taken
// (so that it is read once); a Config that names them twice keeps an error for validate.
func (c Config) withJob() Config {
	job := c.Job
	if job.Name == "" && len(job.Steps) == 0 {
		return c
	}
	c.Job = Job{}
	if c.Pipeline.Name != "" || len(c.Pipeline.Steps) > 0 || c.Steps != nil {
		c.jobErr = errors.New("both a Job and a Pipeline or Steps: give the job's steps in one place, the Job")
		return c
	}
	c.Pipeline, c.Steps = job.Pipeline(), job.implementations()
	var errs []error
	if len(job.Systems) > 0 {
		systems := maps.Clone(c.Systems)
		if systems == nil {
			systems = map[string]undo.System{}
		}
		for name, s := range job.Systems {
			if _, ok := systems[name]; ok {
				errs = append(errs, fmt.Errorf("system %q is both the Job's and the Config's", name))
			}
			systems[name] = s
		}
		c.Systems = systems
	}
	for _, s := range job.Steps {
		if s.Do == nil {
			errs = append(errs, fmt.Errorf("step %q has no implementation (Do)", s.Name))
		}
	}
	if slices.ContainsFunc(job.Steps, func(s Step) bool { return s.Name == "" }) {
		errs = append(errs, errors.New("a step of the job has no name"))
	}
	c.jobErr = errors.Join(errs...)
	return c
}
