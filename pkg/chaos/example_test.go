package chaos_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/cairnhq/cairn/pkg/chaos"
	"github.com/cairnhq/cairn/pkg/pipeline"
)

// The crash points a chaos run tries on a pipeline whose post step made four keyed writes in
// its reference run, and how a trial that wrote a row twice compares with the reference.
func ExamplePoints() {
	d := pipeline.Definition{Name: "enrich", Steps: []pipeline.Step{
		{Name: "fetch", Kind: pipeline.SourceRead, Leased: true},
		{Name: "post", Kind: pipeline.BusinessWrite, Leased: true, Fenced: true},
	}}
	for _, p := range chaos.Points(d, map[string]int{"post": 4}, nil) {
		fmt.Println(p)
	}

	reference := []string{"row run:1 120.00", "row run:2 80.00"}
	trial := []string{"row run:1 120.00", "row run:2 80.00", "row run:2 80.00"}
	diffs, duplicates := chaos.Diff("effect", trial, reference)
	fmt.Println(diffs, duplicates)
	// Output:
	// supervisor.after-record=exit@once
	// fetch.before-commit=exit@once
	// fetch.after-commit=exit@once
	// fetch.before-next-publish=exit@once
	// post.before-commit=exit@once
	// post.after-commit=exit@once
	// post.before-write.1=exit@once
	// post.lost-reply.2=exit@once
	// post.after-write.4=exit@once
	// [effect extra (1): row run:2 80.00] 1
}

// A pipeline's `chaos-sandbox` command serves its outside systems for one trial: it prints
// one line of JSON saying how to reach them, answers GET on the effects URL, and stops when
// the driver closes its standard input.
func ExampleServeSandbox() {
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	sb := chaos.Sandbox{
		Env:   []string{"LEDGER_DSN=file:ledger.db"},
		Input: map[string]any{"date": "2026-10-13"},
		Effects: func(context.Context) (chaos.Effects, error) {
			return chaos.Effects{Effects: []string{"row run:1 120.00"}, Calls: map[string]int{"ledger": 1}}, nil
		},
	}
	done := make(chan error, 1)
	go func() { done <- chaos.ServeSandbox(context.Background(), stdinR, stdoutW, sb) }()

	// The driver's side.
	line, _ := bufio.NewReader(stdoutR).ReadBytes('\n')
	var hello chaos.Hello
	json.Unmarshal(line, &hello)
	fmt.Println(hello.Env, hello.Input)
	resp, err := http.Get(hello.EffectsURL)
	if err != nil {
		fmt.Println(err)
		return
	}
	var e chaos.Effects
	json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	fmt.Println(e.Effects, e.Calls)
	stdinW.Close()
	fmt.Println("stopped:", <-done)
	// Output:
	// [LEDGER_DSN=file:ledger.db] map[date:2026-10-13]
	// [row run:1 120.00] map[ledger:1]
	// stopped: <nil>
}
