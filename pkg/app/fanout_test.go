package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/apptest"
	"github.com/cairnhq/cairn/internal/eventually"
	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/runner"
)

// fan is split → {left, middle, right} side by side → join → final.
var fan = pipeline.Definition{Name: "fan", Input: []string{"word"}, Steps: []pipeline.Step{
	{Name: "split", Kind: pipeline.SourceRead, Recovery: "read again"},
	{Name: "left", Kind: pipeline.Compute, After: []string{"split"}, Recovery: "recomputed"},
	{Name: "middle", Kind: pipeline.Compute, After: []string{"split"}, Recovery: "recomputed"},
	{Name: "right", Kind: pipeline.Compute, After: []string{"split"}, Recovery: "recomputed"},
	{Name: "join", Kind: pipeline.Compute, After: []string{"left", "middle", "right"}, Recovery: "recomputed"},
	{Name: "final", Kind: pipeline.Compute, Leased: true, Recovery: "recomputed"},
}}

// stepFunc is a step written as a function.
type stepFunc func(ctx context.Context, a *runner.Attempt) (*runner.Result, error)

func (f stepFunc) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	return f(ctx, a)
}

// sentFunc is a step that sends messages through the outbox: its output is the keys it
// queued, and its verification checks the outbox holds each one (what a step that writes
// outside must verify before it is done).
type sentFunc func(ctx context.Context, a *runner.Attempt) (*runner.Result, error)

func (f sentFunc) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	return f(ctx, a)
}

func (f sentFunc) Verify(ctx context.Context, a *runner.Attempt, r *runner.Result) error {
	var keys []string
	if err := json.Unmarshal(r.Output, &keys); err != nil {
		return fmt.Errorf("the output is not the list of keys queued: %w", err)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, a.RunID+":") {
			return fmt.Errorf("message %q is not of run %s", k, a.RunID)
		}
	}
	return nil
}

func output(v any) *runner.Result {
	b, _ := json.Marshal(v)
	return &runner.Result{Output: b, Items: 1}
}

// fanSteps are fan's steps. The three branches each wait, when they start, until all three
// have started: run one after another, the first would wait in vain and hand the run over.
// right fails its first attempt; join and final count their attempts.
type fanSteps struct {
	mu            sync.Mutex
	started       map[string]bool
	all           chan struct{}
	rightFailed   atomic.Bool
	rightFailure  func(error) error // how right's first attempt fails: runner.Temporary or runner.Permanent
	joins, finals atomic.Int32
	runs          map[string]*atomic.Int32 // each branch's attempts that got past the start
}

func newFanSteps(rightFailure func(error) error) *fanSteps {
	f := &fanSteps{started: map[string]bool{}, all: make(chan struct{}), rightFailure: rightFailure, runs: map[string]*atomic.Int32{}}
	for _, b := range []string{"left", "middle", "right"} {
		f.runs[b] = &atomic.Int32{}
	}
	return f
}

func (f *fanSteps) branch(name string) runner.Step {
	return stepFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
		f.mu.Lock()
		if !f.started[name] {
			f.started[name] = true
			if len(f.started) == 3 {
				close(f.all)
			}
		}
		f.mu.Unlock()
		select {
		case <-f.all:
		case <-time.After(30 * time.Second):
			return nil, runner.Permanent(fmt.Errorf("%s waited 30s for the other branches to start beside it", name))
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		f.runs[name].Add(1)
		if name == "right" && f.rightFailed.CompareAndSwap(false, true) {
			return nil, f.rightFailure(errors.New("right: the API timed out"))
		}
		b, err := a.Input(ctx, "split")
		if err != nil {
			return nil, err
		}
		var word string
		if err := json.Unmarshal(b, &word); err != nil {
			return nil, err
		}
		return output(name + ":" + word), nil
	})
}

func (f *fanSteps) steps() map[string]runner.Step {
	return map[string]runner.Step{
		"split": stepFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
			return output(a.Params.String("word")), nil
		}),
		"left": f.branch("left"), "middle": f.branch("middle"), "right": f.branch("right"),
		"join": stepFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
			f.joins.Add(1)
			var parts []string
			for _, s := range []string{"left", "middle", "right"} {
				b, err := a.Input(ctx, s)
				if err != nil {
					return nil, err
				}
				var p string
				if err := json.Unmarshal(b, &p); err != nil {
					return nil, err
				}
				parts = append(parts, p)
			}
			return output(parts), nil
		}),
		"final": stepFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
			f.finals.Add(1)
			b, err := a.Input(ctx, "join")
			if err != nil {
				return nil, err
			}
			return &runner.Result{Output: b, Items: 1}, nil
		}),
	}
}

// Steps that wait for one step run side by side once it is verified (fan-out), a step that
// waits for several runs once, when the last of them is verified (join), and a branch that
// fails is retried alone: the run ends done, each step verified once, the join's input the
// three branches' outputs.
func TestFanOutAndJoin(t *testing.T) {
	js, f := hostFan(t, runner.Temporary)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := app.Start(ctx, js, "fan", "fan-1", map[string]any{"word": "cairn"}); err != nil {
		t.Fatal(err)
	}
	rec, err := app.Wait(ctx, js, "fan", "fan-1")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != kc.Done {
		t.Fatalf("run %s, next action %q; want done", rec.Status, rec.NextAction)
	}
	checkJoined(t, rec)
	if j, fl := f.joins.Load(), f.finals.Load(); j != 1 || fl != 1 {
		t.Errorf("join ran %d times, final %d; want once each", j, fl)
	}
	if a, n := rec.Steps["right"].Attempts, rec.Restarts; a != 1 || n != 0 {
		t.Errorf("right's attempts = %d, the run's restarts %d; want its failed one counted once, and no restart", a, n)
	}
	for _, s := range []string{"split", "left", "middle", "join", "final"} {
		if a := rec.Steps[s].Attempts; a != 0 {
			t.Errorf("%s's attempts = %d, want 0", s, a)
		}
	}
	if want := kc.Graph(fan.Graph()); !equalGraph(rec.After, want) {
		t.Errorf("the record's after = %v, want %v", rec.After, want)
	}
}

// A branch that fails for good hands the run over while the branches beside it finish and
// keep their checkpoints; a resume runs that branch alone, then the join. A rerun from one
// branch runs it and the steps after it again, not the branches beside it.
func TestFanOutBranchResumedAndRerun(t *testing.T) {
	js, f := hostFan(t, runner.Permanent)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := app.Start(ctx, js, "fan", "fan-2", map[string]any{"word": "rock"}); err != nil {
		t.Fatal(err)
	}
	store, err := kc.Open(ctx, js, "cairn-fan-runs")
	if err != nil {
		t.Fatal(err)
	}
	rec := waitRecord(ctx, t, store, "fan-2", "handed over, left and middle verified", func(r *kc.Record) bool {
		return r.Status == kc.HandedOver && r.Steps["left"].Status == kc.Verified && r.Steps["middle"].Status == kc.Verified
	})
	if s := rec.Steps["right"].Status; s != kc.Failed || rec.Steps["join"].Status != kc.Pending || f.joins.Load() != 0 {
		t.Fatalf("handed over with right %s, join %s (ran %d times); want failed, pending, never", s, rec.Steps["join"].Status, f.joins.Load())
	}
	if err := app.Command(ctx, js, "fan", "fan-2", events.VerbResume, "resume-1", events.Command{}); err != nil {
		t.Fatal(err)
	}
	rec = waitRecord(ctx, t, store, "fan-2", "done", func(r *kc.Record) bool { return r.Status == kc.Done })
	checkJoined(t, rec)
	runs := func() [5]int32 {
		return [5]int32{f.runs["left"].Load(), f.runs["middle"].Load(), f.runs["right"].Load(), f.joins.Load(), f.finals.Load()}
	}
	if got, want := runs(), [5]int32{1, 1, 2, 1, 1}; got != want {
		t.Fatalf("after the resume, left, middle, right, join, final ran %v times; want %v", got, want)
	}
	tokens := map[string]uint64{"left": *rec.Steps["left"].Token, "right": *rec.Steps["right"].Token}

	if err := app.Command(ctx, js, "fan", "fan-2", events.VerbRerun, "rerun-1", events.Command{From: "middle"}); err != nil {
		t.Fatal(err)
	}
	rec = waitRecord(ctx, t, store, "fan-2", "done again, generation 1", func(r *kc.Record) bool { return r.Status == kc.Done && r.Generation == 1 })
	if got, want := runs(), [5]int32{1, 2, 2, 2, 2}; got != want {
		t.Errorf("after the rerun from middle, left, middle, right, join, final ran %v times; want %v", got, want)
	}
	for s, tok := range tokens {
		if got := *rec.Steps[s].Token; got != tok {
			t.Errorf("%s's checkpoint was replaced (token %d, was %d): a rerun from middle redid a branch beside it", s, got, tok)
		}
	}
	checkJoined(t, rec)
}

func checkJoined(t *testing.T, rec *kc.Record) {
	t.Helper()
	var joined []string
	if err := json.Unmarshal(rec.Steps["final"].Output.Inline, &joined); err != nil {
		t.Fatalf("final's output %s: %v", rec.Steps["final"].Output.Inline, err)
	}
	word := rec.Params.String("word")
	if want := []string{"left:" + word, "middle:" + word, "right:" + word}; !slices.Equal(joined, want) {
		t.Errorf("final's output %v, want %v", joined, want)
	}
}

// waitRecord reads run's record until ok holds, or fails the test naming what it waited for.
func waitRecord(ctx context.Context, t *testing.T, store *kc.Store, run, what string, ok func(*kc.Record) bool) *kc.Record {
	t.Helper()
	var last *kc.Record
	eventually.That(t, time.Minute, run+" "+what, func() error {
		rec, _, err := store.Load(ctx, run)
		if err != nil {
			return err
		}
		if last = rec; !ok(rec) {
			return fmt.Errorf("last record: %+v", rec)
		}
		return nil
	})
	return last
}

// hostFan runs fan on an embedded NATS until the test ends; right's first attempt fails
// with rightFailure.
func hostFan(t *testing.T, rightFailure func(error) error) (jetstream.JetStream, *fanSteps) {
	t.Helper()
	js := natsFor(t)
	f := newFanSteps(rightFailure)
	apptest.Host(t.Context(), t, app.Config{JS: js, KeysDir: filepath.Join(t.TempDir(), "keys"), Pipeline: fan, Steps: f.steps()})
	return js, f
}

func equalGraph(a, b kc.Graph) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !slices.Equal(v, w) {
			return false
		}
	}
	return true
}
