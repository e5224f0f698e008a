package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/runner"
)

// greet's first step reads the run's input; its output is the checkpoint's.
type readName struct{}

func (readName) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	out, _ := json.Marshal(map[string]string{"name": a.Params.String("name")})
	return &runner.Result{Output: out, Items: 1, NextAction: "shout the name"}, nil
}

// shout reads the earlier step's verified output and makes a memoised call: a restart
// after the call never makes it again.
type shout struct{}

func (shout) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	b, err := a.Input(ctx, "read")
	if err != nil {
		return nil, err
	}
	var in struct{ Name string }
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, err
	}
	answer, err := a.Memo(ctx, "shout."+in.Name, func(ctx context.Context) ([]byte, error) {
		return json.Marshal(strings.ToUpper(in.Name) + "!") // an outside call would go here
	})
	if err != nil {
		return nil, err
	}
	return &runner.Result{Output: answer, Items: 1}, nil
}

// A pipeline of two steps, hosted in one process on an embedded NATS server: Init makes
// its assets and keys, Run its services, Start a run and Wait its end.
func ExampleRun() {
	dir, _ := os.MkdirTemp("", "cairn-example")
	defer os.RemoveAll(dir)
	srv, err := app.Embedded("example", "127.0.0.1", -1, filepath.Join(dir, "nats"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Shutdown()
	nc, _ := nats.Connect(srv.ClientURL())
	defer nc.Close()
	js, _ := jetstream.New(nc)

	cfg := app.Config{
		JS: js, KeysDir: filepath.Join(dir, "keys"),
		Pipeline: pipeline.Definition{Name: "greet", Input: []string{"name"}, Steps: []pipeline.Step{
			{Name: "read", Kind: pipeline.SourceRead, Recovery: "read again"},
			{Name: "shout", Kind: pipeline.ModelCall, Leased: true, Effects: "a paid call", Memo: "cairn-greet-memo, <run>.shout.<name>", Recovery: "memoised: never asked twice"},
		}},
		Steps: map[string]runner.Step{"read": readName{}, "shout": shout{}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := app.Init(ctx, cfg); err != nil {
		fmt.Println(err)
		return
	}
	running, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- app.Run(running, cfg) }()

	if err := app.Start(ctx, js, "greet", "greet-1", map[string]any{"name": "cairn"}); err != nil {
		fmt.Println(err)
		return
	}
	rec, err := app.Wait(ctx, js, "greet", "greet-1")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(rec.Status, rec.Steps["read"].Status, rec.Steps["shout"].Status, string(rec.Steps["shout"].Output.Inline))
	stop()
	fmt.Println(<-done)
	// Output:
	// done verified verified "CAIRN!"
	// <nil>
}
