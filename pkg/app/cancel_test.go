package app_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/runner"
)

// A hosted run cancelled while its first step's event waits, no step service running yet:
// when the step services start and take the event, the step does not run and the run stays
// cancelled, its step pending; a resume then runs each step once.
func TestCancelBeforeTheStepIsTaken(t *testing.T) {
	js := natsFor(t)
	def := pipeline.Definition{Name: "hold", Input: []string{"word"}, Steps: []pipeline.Step{
		{Name: "first", Kind: pipeline.Compute, Recovery: "recomputed"},
		{Name: "second", Kind: pipeline.Compute, Leased: true, Recovery: "recomputed"},
	}}
	var firsts, seconds atomic.Int32
	cfg := app.Config{JS: js, KeysDir: filepath.Join(t.TempDir(), "keys"), Pipeline: def, Steps: map[string]runner.Step{
		"first": stepFunc(func(context.Context, *runner.Attempt) (*runner.Result, error) {
			firsts.Add(1)
			return output("one"), nil
		}),
		"second": stepFunc(func(context.Context, *runner.Attempt) (*runner.Result, error) {
			seconds.Add(1)
			return output("two"), nil
		}),
	}}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := app.Init(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	run := func(services ...string) {
		running, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- app.Run(running, cfg, services...) }()
		t.Cleanup(func() {
			stop()
			if err := <-done; err != nil {
				t.Errorf("run %v: %v", services, err)
			}
		})
	}
	run(app.Supervisor)
	store, err := kc.Open(ctx, js, "cairn-hold-runs")
	if err != nil {
		t.Fatal(err)
	}
	if err := app.Start(ctx, js, "hold", "hold-1", map[string]any{"word": "wait"}); err != nil {
		t.Fatal(err)
	}
	waitRecord(ctx, t, store, "hold-1", "running", func(r *kc.Record) bool { return r.Status == kc.Running })
	if err := app.Command(ctx, js, "hold", "hold-1", events.VerbCancel, "cancel-1", events.Command{}); err != nil {
		t.Fatal(err)
	}
	waitRecord(ctx, t, store, "hold-1", "cancelled", func(r *kc.Record) bool { return r.Status == kc.Cancelled })

	run("first", "second")
	durable, err := js.Consumer(ctx, "CAIRN_HOLD_STEPS", "first")
	if err != nil {
		t.Fatal(err)
	}
	for { // the event is taken and settled: nothing waits for the first step any more
		info, err := durable.Info(ctx)
		if err == nil && info.Delivered.Stream > 0 && info.NumPending == 0 && info.NumAckPending == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the first step's event was never taken and settled: %+v, %v", info, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	rec, _, err := store.Load(ctx, "hold-1")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != kc.Cancelled || rec.Steps["first"].Status != kc.Pending || firsts.Load() != 0 {
		t.Fatalf("after the event was taken: run %s, first %s, ran %d times; want cancelled, pending, never", rec.Status, rec.Steps["first"].Status, firsts.Load())
	}

	if err := app.Command(ctx, js, "hold", "hold-1", events.VerbResume, "resume-1", events.Command{}); err != nil {
		t.Fatal(err)
	}
	// app.Wait would return at once: cancelled is where a run stops.
	rec = waitRecord(ctx, t, store, "hold-1", "done", func(r *kc.Record) bool { return r.Status == kc.Done })
	if rec.Status != kc.Done || firsts.Load() != 1 || seconds.Load() != 1 {
		t.Fatalf("after the resume: run %s, first ran %d times, second %d; want done, once each", rec.Status, firsts.Load(), seconds.Load())
	}
}
