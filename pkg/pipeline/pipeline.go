// Package pipeline describes a pipeline: its steps in order, and for each the kind that
// decides its recovery rule.
package pipeline

import (
	"errors"
	"fmt"
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
type Step struct {
	Name         string
	Kind         Kind
	Leased       bool   // takes the run's lease (false: lease-free commit)
	Fenced       bool   // writes to fenced outside systems
	Irreversible bool   // its effects cannot be reversed, only answered (a sent message)
	Recovery     string // the recovery rule, in a sentence
}

// Definition is a pipeline.
type Definition struct {
	Name  string
	Steps []Step
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

// Validate checks names are unique and that writing steps take the lease.
func (d Definition) Validate() error {
	seen := map[string]bool{}
	var errs []error
	for _, s := range d.Steps {
		if seen[s.Name] {
			errs = append(errs, fmt.Errorf("step %q appears twice", s.Name))
		}
		seen[s.Name] = true
		if s.Fenced && !s.Leased {
			errs = append(errs, fmt.Errorf("step %q writes fenced systems but takes no lease", s.Name))
		}
	}
	if len(d.Steps) == 0 {
		errs = append(errs, errors.New("the pipeline has no steps"))
	}
	return errors.Join(errs...)
}
