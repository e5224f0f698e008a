package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/internal/stepevent"
	"github.com/cairnhq/cairn/pkg/artifacts"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/runner"
)

// toy is a three-step pipeline: a leased step, a lease-free one, and a leased last step.
var toy = pipeline.Definition{Name: "toy", Input: []string{"warehouse", "date"}, Steps: []pipeline.Step{
	{Name: "one", Kind: pipeline.BusinessWrite, Leased: true},
	{Name: "two", Kind: pipeline.Compute},
	{Name: "three", Kind: pipeline.OutsideMessage, Leased: true},
}}

// stepFunc makes a function a step.
type stepFunc func(ctx context.Context, a *runner.Attempt) (*runner.Result, error)

func (f stepFunc) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	return f(ctx, a)
}

// writeFunc is a step function declared as writing outside: its verification checks that
// its output was stored (the toy's writes are saga records, which the runner counts).
type writeFunc func(ctx context.Context, a *runner.Attempt) (*runner.Result, error)

func (f writeFunc) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	return f(ctx, a)
}

func (writeFunc) Verify(_ context.Context, _ *runner.Attempt, r *runner.Result) error {
	if len(r.Output) == 0 {
		return errors.New("no output")
	}
	return nil
}

// output returns a step that succeeds with a small JSON output naming it.
func output(name string) stepFunc {
	return func(context.Context, *runner.Attempt) (*runner.Result, error) {
		return &runner.Result{Output: json.RawMessage(`{"step":"` + name + `"}`)}, nil
	}
}

type fixture struct {
	js        jetstream.JetStream
	store     *kc.Store
	artifacts *artifacts.Store
	handovers jetstream.KeyValue
}

func setup(t testing.TB) *fixture {
	t.Helper()
	ctx := context.Background()
	js := natstest.JetStream(t)
	if err := assets.Ensure(ctx, js, assets.Config{Steps: toy.Names(), AckWait: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	store, err := kc.Open(ctx, js, assets.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	art, err := artifacts.Open(ctx, js, assets.ObjectArtifacts)
	if err != nil {
		t.Fatal(err)
	}
	h, err := js.KeyValue(ctx, assets.BucketHandovers)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{js: js, store: store, artifacts: art, handovers: h}
}

// config is a runner configuration for step with short timings.
func (f *fixture) config(step string, impl runner.Step) runner.Config {
	return runner.Config{
		JS: f.js, Store: f.store, Artifacts: f.artifacts, Handovers: f.handovers, Pipeline: toy,
		StepName: step, Step: impl, Heartbeat: 100 * time.Millisecond, Lease: 300 * time.Millisecond,
		TakeoverGap: 50 * time.Millisecond, LoopGuard: 2,
	}
}

// run starts a runner for step until the test ends.
func (f *fixture) run(t *testing.T, c runner.Config) *runner.Runner {
	t.Helper()
	r, err := runner.New(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runner %s: %v", c.StepName, err)
		}
	})
	return r
}

// start creates the run's record and publishes its first step's event.
func (f *fixture) start(t *testing.T, runID string) {
	t.Helper()
	ctx := context.Background()
	rev, err := f.store.Create(ctx, kc.New(runID, kc.StringParams(false, "warehouse", "w", "date", "2026-10-13"), toy.Names(), "2026-10-13T22:00:00Z"))
	if err != nil {
		t.Fatal(err)
	}
	if err := stepevent.Publish(ctx, f.js, assets.Default, "/cairn/test", runID, "one", 0, rev, time.Now()); err != nil {
		t.Fatal(err)
	}
}

// wait watches the run's record until ok says so, within a minute.
func (f *fixture) wait(t *testing.T, runID string, ok func(*kc.Record) bool) *kc.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := f.store.KV().Watch(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	var last *kc.Record
	for e := range w.Updates() {
		if e == nil {
			continue
		}
		r, err := kc.Decode(e.Value())
		if err != nil {
			t.Fatal(err)
		}
		last = r
		if ok(r) {
			return r
		}
	}
	t.Fatalf("run %s: condition not met within a minute; last record %+v", runID, last)
	return nil
}

// audit returns the run's audit events.
func (f *fixture) audit(t *testing.T, runID string) []events.Audit {
	t.Helper()
	evs, err := events.ReadSubject(context.Background(), f.js, assets.StreamAudit, events.AuditSubject(runID))
	if err != nil {
		t.Fatal(err)
	}
	out := make([]events.Audit, 0, len(evs))
	for _, e := range evs {
		var a events.Audit
		if err := e.Unmarshal(&a); err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	return out
}

func count(as []events.Audit, event, step string) int {
	n := 0
	for _, a := range as {
		if a.Event == event && (step == "" || a.Step == step) {
			n++
		}
	}
	return n
}

var errBoom = errors.New("boom")
