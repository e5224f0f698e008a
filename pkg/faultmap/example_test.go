package faultmap_test

import (
	"fmt"

	"github.com/cairnhq/cairn/pkg/faultmap"
	"github.com/cairnhq/cairn/pkg/pipeline"
)

// A job author checks a pipeline's fault map before shipping it (`cairn faultmap` prints it
// whole; WriteText): each gap names its step, and the map has none once they are mended.
func ExampleAnalyze() {
	d := pipeline.Definition{
		Name:  "enrich",
		Input: []string{"date"},
		Steps: []pipeline.Step{
			{Name: "fetch", Kind: pipeline.SourceRead, Leased: true, Checkpoint: "the document list"},
			{Name: "classify", Kind: pipeline.ModelCall, Effects: "model call", ItemRetries: true, RateLimit: "CAIRN_MODEL_RPS"},
			{Name: "post", Kind: pipeline.BusinessWrite, Leased: true, Fenced: true, Effects: "rows of the accounts",
				Key: "<run>:<row>, the table's primary key", Compensation: "reversal row <key>:rev"},
		},
	}
	settings := faultmap.Settings{RateLimits: map[string]float64{"CAIRN_MODEL_RPS": 2}}
	m, _ := faultmap.Analyze(d, settings)
	r := m.Steps[1].Retry
	fmt.Printf("classify: %d calls of one item at worst, %d in one second\n", r.WorstCalls, r.PeakPerSecond)
	fmt.Println(m.Err())
	for _, g := range m.Gaps {
		fmt.Println(" ", g.Step, g.Kind)
	}

	d.Steps[1].Memo = "cairn-memo, <run>:<document>"
	d.Steps[2].ChecksSource = true
	settings.RateLimits["CAIRN_MODEL_RPS"] = 5
	m, _ = faultmap.Analyze(d, settings)
	fmt.Println("mended:", m.Err())
	// Output:
	// classify: 9 calls of one item at worst, 3 in one second
	// fault map gaps: 3 found in pipeline enrich
	//   classify model-call-without-memo
	//   classify retry-over-rate-limit
	//   post write-without-source-check
	// mended: <nil>
}
