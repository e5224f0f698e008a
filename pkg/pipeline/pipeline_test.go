package pipeline_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/cairnhq/cairn/pkg/pipeline"
)

func TestEffects(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name                        string
		s                           pipeline.Step
		effects, writes, reversible bool
	}{
		{"compute", pipeline.Step{Kind: pipeline.Compute}, false, false, false},
		{"ledger rows", pipeline.Step{Kind: pipeline.BusinessWrite, Effects: "ledger rows"}, true, true, true},
		{"mail", pipeline.Step{Kind: pipeline.OutsideMessage, Effects: "mail", Irreversible: true}, true, true, false},
		{"irreversible, effects unnamed", pipeline.Step{Kind: pipeline.OutsideMessage, Irreversible: true}, true, true, false},
		{"model call", pipeline.Step{Kind: pipeline.ModelCall, Effects: "model call"}, true, false, false},
	} {
		if got := [3]bool{tt.s.HasEffects(), tt.s.Writes(), tt.s.ReversibleWrites()}; got != [3]bool{tt.effects, tt.writes, tt.reversible} {
			t.Errorf("%s: effects, writes, reversible writes = %v, want %v", tt.name, got, [3]bool{tt.effects, tt.writes, tt.reversible})
		}
	}
}

// A graph: each step waits for the ones it names, or the one before it; only lease-free
// steps run beside others, and a leased one after the join is fine.
func TestGraph(t *testing.T) {
	t.Parallel()
	d := pipeline.Definition{Name: "fan", Steps: []pipeline.Step{
		{Name: "fetch", Leased: true},
		{Name: "a", After: []string{"fetch"}}, {Name: "b", After: []string{"fetch"}},
		{Name: "join", After: []string{"a", "b"}},
		{Name: "upload", Leased: true, Fenced: true},
	}}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	g := d.Graph()
	want := map[string][]string{"fetch": {}, "a": {"fetch"}, "b": {"fetch"}, "join": {"a", "b"}, "upload": {"join"}}
	if len(g) != len(want) {
		t.Fatalf("graph %v, want %v", g, want)
	}
	for k, v := range want {
		if !slices.Equal(g[k], v) {
			t.Errorf("%s waits for %v, want %v", k, g[k], v)
		}
	}
	if g := (pipeline.Definition{Steps: []pipeline.Step{{Name: "a"}, {Name: "b"}}}).Graph(); g != nil {
		t.Errorf("a pipeline naming no After has graph %v, want nil", g)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	ok := pipeline.Definition{Name: "ok", Steps: []pipeline.Step{{Name: "a", Leased: true, Fenced: true}, {Name: "b"}}}
	if err := ok.Validate(); err != nil {
		t.Errorf("valid definition: %v", err)
	}
	for _, tt := range []struct {
		d    pipeline.Definition
		want string
	}{
		{pipeline.Definition{Name: "dup", Steps: []pipeline.Step{{Name: "a"}, {Name: "a"}}}, `step "a" appears twice`},
		{pipeline.Definition{Name: "unleased", Steps: []pipeline.Step{{Name: "a", Fenced: true}}}, "takes no lease"},
		{pipeline.Definition{Name: "empty"}, "no steps"},
		{pipeline.Definition{Name: "later", Steps: []pipeline.Step{{Name: "a", After: []string{"b"}}, {Name: "b"}}}, `step "a" waits for "b", which is not a step declared before it`},
		{pipeline.Definition{Name: "self", Steps: []pipeline.Step{{Name: "a"}, {Name: "b", After: []string{"b"}}}}, `step "b" waits for itself`},
		{pipeline.Definition{Name: "twice", Steps: []pipeline.Step{{Name: "a"}, {Name: "b", After: []string{"a", "a"}}}}, `step "b" waits for "a" twice`},
		{pipeline.Definition{Name: "leased-beside", Steps: []pipeline.Step{{Name: "a"}, {Name: "b", After: []string{"a"}, Leased: true}, {Name: "c", After: []string{"a"}}}},
			`step "b" takes the run's lease and may run beside step "c"`},
	} {
		if err := tt.d.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err %v, want one naming %q", tt.d.Name, err, tt.want)
		}
	}
}
