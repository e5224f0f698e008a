package runner_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/runner"
)

// words is the job's input.
type words struct {
	Text string `json:"text"`
}

// A typed step reads what it waits for as a Go value: split's input is the run's, upper's
// and count's are split's output, and join waits for both, reading an object of their
// outputs by step name. Each returns its own output; the record keeps them as JSON.
func ExampleFunc() {
	split := runner.Func(func(ctx context.Context, a *runner.Attempt, in words) ([]string, error) {
		return strings.Fields(in.Text), nil
	})
	upper := runner.Func(func(ctx context.Context, a *runner.Attempt, ws []string) ([]string, error) {
		out := make([]string, len(ws))
		for i, w := range ws {
			out[i] = strings.ToUpper(w)
		}
		return out, nil
	})
	count := runner.Func(func(ctx context.Context, a *runner.Attempt, ws []string) (int, error) {
		return len(ws), nil
	})
	join := runner.Func(func(ctx context.Context, a *runner.Attempt, in struct {
		Upper []string `json:"upper"`
		Count int      `json:"count"`
	}) (string, error) {
		return fmt.Sprintf("%d words: %s", in.Count, strings.Join(in.Upper, " ")), nil
	})
	job := app.Job{Name: "words", Input: []string{"text"}, Steps: []app.Step{
		app.Read("split", split),
		app.Compute("upper", upper).After("split"),
		app.Compute("count", count).After("split"),
		app.Compute("join", join).After("upper", "count"),
	}}

	dir, _ := os.MkdirTemp("", "cairn-runner-example")
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	local, err := app.RunLocal(ctx, dir, job)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer local.Close()
	if err := local.Start(ctx, "w-1", words{Text: "nothing lost nothing done twice"}); err != nil {
		fmt.Println(err)
		return
	}
	var joined string
	if err := local.Output(ctx, "w-1", "join", &joined); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(joined)
	rec, _ := local.Wait(ctx, "w-1")
	fmt.Println(rec.Status, rec.Steps["upper"].Status, rec.Steps["count"].Status)
	// Output:
	// 5 words: NOTHING LOST NOTHING DONE TWICE
	// done verified verified
}
