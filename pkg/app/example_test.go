package app_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/runner"
)

// person is the job's input: the members of a start.
type person struct {
	Name string `json:"name"`
}

// greet is a job of two steps in one list. read's input is the run's; shout's is read's
// output, and its call is memoised: a restart after it never makes it again.
var greet = app.Job{Name: "greet", Input: []string{"name"}, Steps: []app.Step{
	app.Read("read", runner.Func(func(ctx context.Context, a *runner.Attempt, in person) (string, error) {
		return in.Name, nil
	})),
	app.Call("shout", runner.Func(func(ctx context.Context, a *runner.Attempt, name string) (string, error) {
		return runner.Memo(ctx, a, "shout."+name, func(ctx context.Context) (string, error) {
			return strings.ToUpper(name) + "!", nil // a paid call would go here
		})
	})),
}}

// A job hosted whole in this process (RunLocal: Init and Run on an embedded NATS server),
// one run started and its output read.
func ExampleRun() {
	dir, _ := os.MkdirTemp("", "cairn-example")
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	local, err := app.RunLocal(ctx, dir, greet)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer local.Close()
	if err := local.Start(ctx, "greet-1", person{Name: "cairn"}); err != nil {
		fmt.Println(err)
		return
	}
	var shouted string
	if err := local.Output(ctx, "greet-1", "shout", &shouted); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(shouted)
	// Output: CAIRN!
}
