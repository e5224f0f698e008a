package runner_test

import (
	"context"
	"strings"
	"testing"

	"github.com/cairnhq/cairn/pkg/fence"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/runner"
)

// fencer is a step that raises fences and verifies what it wrote.
type fencer struct{ stepFunc }

func (fencer) RaiseFences(context.Context, *runner.Attempt, fence.Token) error { return nil }

func (fencer) Verify(context.Context, *runner.Attempt, *runner.Result) error { return nil }

// A step whose declaration contradicts what its implementation does is refused at start,
// naming the step and the contradiction; the same step declared as it behaves starts.
func TestContradictingDeclarationRefused(t *testing.T) {
	f := setup(t)
	plain, raising := output("one"), fencer{output("one")}
	for _, tc := range []struct {
		name string
		def  pipeline.Step
		impl runner.Step
		want string // "" starts
	}{
		{"fenced, raises none", pipeline.Step{Kind: pipeline.BusinessWrite, Leased: true, Fenced: true, Effects: "rows", Key: "k"}, plain,
			"its definition says it is fenced true, its implementation raises fences false"},
		{"raises fences, not declared", pipeline.Step{Kind: pipeline.BusinessWrite, Leased: true, Effects: "rows", Key: "k"}, raising,
			"its definition says it is fenced false, its implementation raises fences true"},
		{"model call, no memo", pipeline.Step{Kind: pipeline.ModelCall, Leased: true, Effects: "model call"}, plain,
			"a model call that is not memoised"},
		{"writes, no key", pipeline.Step{Kind: pipeline.BusinessWrite, Leased: true, Effects: "rows"}, plain,
			"writes to an outside system (rows) but its definition names no Key"},
		{"writes, verifies nothing", pipeline.Step{Kind: pipeline.OutsideMessage, Leased: true, Effects: "mail", Key: "k"}, plain,
			"writes to an outside system (mail) but verifies nothing before it is done"},
		{"cannot be undone, takes no lease", pipeline.Step{Kind: pipeline.Compute, Irreversible: true}, plain,
			"cannot be undone, and would not stop while the run's evidence is unclear: it takes no lease"},
		{"checks the source, no checker", pipeline.Step{Kind: pipeline.Compute, ChecksSource: true}, plain,
			"its definition says it checks the source true, its implementation false"},
		{"as declared: fenced", pipeline.Step{Kind: pipeline.BusinessWrite, Leased: true, Fenced: true, Effects: "rows", Key: "k"}, raising, ""},
		{"as declared: memoised model call", pipeline.Step{Kind: pipeline.ModelCall, Leased: true, Effects: "model call", Memo: "memo"}, plain, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			def := tc.def
			def.Name = "one"
			c := f.config("one", tc.impl)
			c.Pipeline = pipeline.Definition{Name: "toy", Steps: []pipeline.Step{def, toy.Steps[1], toy.Steps[2]}}
			_, err := runner.New(c)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused a step declared as it behaves: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `step "one"`)):
				t.Fatalf("New: %v, want an error naming step \"one\" and %q", err, tc.want)
			}
		})
	}
}
