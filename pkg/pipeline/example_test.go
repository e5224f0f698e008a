package pipeline_test

import (
	"encoding/json"
	"fmt"

	"github.com/cairnhq/cairn/pkg/pipeline"
)

// A pipeline that fans out after its source read and joins before its one business write:
// the two model calls run side by side, lease-free; the write waits for both and takes the
// run's lease.
func ExampleDefinition_Validate() {
	d := pipeline.Definition{
		Name:  "enrich",
		Input: []string{"date"},
		Steps: []pipeline.Step{
			{Name: "fetch", Kind: pipeline.SourceRead, Leased: true},
			{Name: "classify", Kind: pipeline.ModelCall, After: []string{"fetch"}},
			{Name: "summarise", Kind: pipeline.ModelCall, After: []string{"fetch"}},
			{Name: "post", Kind: pipeline.BusinessWrite, After: []string{"classify", "summarise"}, Leased: true, Fenced: true,
				Effects: "rows of the accounts", Key: "<run>:<row>, the table's primary key; fenced"},
		},
	}
	fmt.Println("valid:", d.Validate())
	fmt.Println("post waits for", d.Waits("post"))
	fmt.Println("classify runs beside", d.Beside("classify"))
	post, _ := d.Step("post")
	fmt.Println("post writes:", post.Writes(), "reversible:", post.ReversibleWrites())
	input := map[string]json.RawMessage{"date": json.RawMessage(`"2026-10-13"`)}
	fmt.Println("run id of a start without one:", d.DefaultRunID(input))

	// A model call that takes the run's lease cannot run beside another step.
	d.Steps[1].Leased = true
	fmt.Println(d.Validate())
	// Output:
	// valid: <nil>
	// post waits for [classify summarise]
	// classify runs beside [summarise]
	// post writes: true reversible: true
	// run id of a start without one: run-3b9b0d777f5b8186
	// step "classify" takes the run's lease and may run beside step "summarise" (neither waits for the other): a step that runs beside another must be lease-free
}
