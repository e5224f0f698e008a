package pipeline_test

import (
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
	} {
		if err := tt.d.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err %v, want one naming %q", tt.d.Name, err, tt.want)
		}
	}
}
