package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnhq/cairn/internal/handover"
	"github.com/cairnhq/cairn/internal/stepevent"
	"github.com/cairnhq/cairn/pkg/assets"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
)

// counted is a step with a progress counter: run says what an attempt does, progress what
// the step has made durable so far.
type counted struct {
	run      stepFunc
	progress func() runner.Progress
	counts   atomic.Int32
}

func (c *counted) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	return c.run(ctx, a)
}

func (c *counted) Progress(context.Context, *runner.Attempt) (runner.Progress, error) {
	c.counts.Add(1)
	return c.progress(), nil
}

// died creates run r1 whose step one's earlier attempts died: in progress, no lease,
// attempts and the loop guard's count as given, and publishes the step's event.
func (f *fixture) died(t *testing.T, attempts int, p *kc.Progress) {
	t.Helper()
	ctx := context.Background()
	rec := kc.New("r1", kc.StringParams(false, "warehouse", "w", "date", "2026-10-13"), toy.Names(), "2026-10-13T22:00:00Z")
	rec.Step("one").Status = kc.InProgress
	rec.Step("one").Attempts = attempts
	rec.Progress = p
	rev, err := f.store.Create(ctx, rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := stepevent.Publish(ctx, f.js, assets.Default, "/cairn/test", "r1", "one", 0, rev, time.Now()); err != nil {
		t.Fatal(err)
	}
}

// A restart that finds more made durable than the last count is no loop, however many
// attempts died before it (the guard is 2); one that finds no more than the count after
// LoopGuard-1 such attempts hands the run over, the note naming the item it is stuck at.
func TestLoopGuardCountsRestartsWithoutProgress(t *testing.T) {
	for name, tc := range map[string]struct {
		durable  int
		handover bool
	}{
		"progressed": {durable: 6},
		"stuck":      {durable: 5, handover: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			var ran atomic.Int32
			step := &counted{
				run: func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
					ran.Add(1)
					return output("one")(ctx, a)
				},
				progress: func() runner.Progress { return runner.Progress{Keys: tc.durable, Next: "item-6"} },
			}
			f.runAll(t, step)
			f.died(t, 7, &kc.Progress{Step: "one", Count: 5, NoProgress: 1})
			if !tc.handover {
				rec := f.wait(t, "r1", finishing)
				if rec.Step("one").Attempts != 8 || ran.Load() != 1 || rec.Progress != nil {
					t.Errorf("attempts %d, ran %d, progress %+v; want 8 attempts, one run, the count gone with its step", rec.Step("one").Attempts, ran.Load(), rec.Progress)
				}
				if n := count(f.audit(t, "r1"), "step.progressed", "one"); n != 1 {
					t.Errorf("%d step.progressed events, want 1", n)
				}
				return
			}
			rec := f.wait(t, "r1", handedOver)
			n := f.note(t, "r1")
			if ran.Load() != 0 || rec.Progress == nil || *rec.Progress != (kc.Progress{Step: "one", Count: 5, NoProgress: 2}) {
				t.Errorf("ran %d, progress %+v; want no run and 2 attempts without progress", ran.Load(), rec.Progress)
			}
			if want := "2 attempts of one made no progress (loop guard 2); stuck at item-6"; !strings.Contains(n.Error, want) {
				t.Errorf("note error %q, want %q", n.Error, want)
			}
			if n.Done.Keys != 5 || len(n.Done.Steps) != 1 || !n.Done.Steps[0].ReadBack || n.Done.Steps[0].Next != "item-6" {
				t.Errorf("note done %+v, want the 5 keys read back and the item", n.Done)
			}
		})
	}
}

// A step without a counter keeps the rule of every failed attempt counting.
func TestLoopGuardWithoutCounterCountsAttempts(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.runAll(t, output("one"))
	f.died(t, 1, nil)
	rec := f.wait(t, "r1", handedOver)
	if s := rec.Step("one"); s.Attempts != 2 || s.LastError == nil || !strings.Contains(*s.LastError, "2 attempts of one failed (loop guard 2)") {
		t.Errorf("step one: attempts %d, last error %v", s.Attempts, s.LastError)
	}
}

// Temporary failures: each attempt that leaves more made durable starts the count again,
// so a step that progresses runs past the guard (2) and finishes; a step that leaves no
// more is handed over after 2 attempts without progress, counted at each failure.
func TestLoopGuardCountsTemporaryFailures(t *testing.T) {
	for name, tc := range map[string]struct {
		grows    bool
		handover bool
		attempts int // recorded at the end
	}{
		"progressing": {grows: true, attempts: 3},
		"stuck":       {handover: true, attempts: 2},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			var tries atomic.Int32
			step := &counted{
				run: func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
					if tries.Add(1) <= 3 {
						return nil, runner.Temporary(fmt.Errorf("try %d: %w", tries.Load(), errBoom))
					}
					return output("one")(ctx, a)
				},
				progress: func() runner.Progress {
					if tc.grows {
						return runner.Progress{Memoised: int(tries.Load())}
					}
					return runner.Progress{Memoised: 1, Next: "doc-2"}
				},
			}
			f.runAll(t, step)
			f.start(t, "r1")
			if !tc.handover {
				rec := f.wait(t, "r1", finishing)
				if rec.Step("one").Attempts != tc.attempts || tries.Load() != 4 {
					t.Errorf("attempts %d, tries %d; want %d failed attempts then the one that finished", rec.Step("one").Attempts, tries.Load(), tc.attempts)
				}
				return
			}
			rec := f.wait(t, "r1", handedOver)
			// Attempt 1 made the 1 (from nothing), attempts 2 and 3 made no more.
			if tries.Load() != 3 || rec.Step("one").Attempts != tc.attempts || rec.Progress == nil || rec.Progress.NoProgress != 2 {
				t.Errorf("tries %d, attempts %d, progress %+v", tries.Load(), rec.Step("one").Attempts, rec.Progress)
			}
			if n := f.note(t, "r1"); !strings.Contains(n.Error, "made no progress (loop guard 2); stuck at doc-2; last: try 3: boom") {
				t.Errorf("note error %q", n.Error)
			}
		})
	}
}

// A lease-free step with a counter is counted when its event comes back.
func TestLoopGuardLeaseFree(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var tries atomic.Int32
	two := &counted{
		run: func(context.Context, *runner.Attempt) (*runner.Result, error) {
			tries.Add(1)
			return nil, runner.Temporary(errBoom)
		},
		progress: func() runner.Progress { return runner.Progress{Parked: 0, Next: "line-1"} },
	}
	f.run(t, f.config("one", output("one")))
	f.run(t, f.config("two", two))
	f.run(t, f.config("three", output("three")))
	f.start(t, "r1")
	rec := f.wait(t, "r1", handedOver)
	// Tries 2 and 3 began with nothing made: the third hands over before it runs.
	if tries.Load() != 2 || rec.Step("two").Status != kc.Failed || rec.Progress == nil || rec.Progress.NoProgress != 2 {
		t.Errorf("tries %d, step two %s, progress %+v", tries.Load(), rec.Step("two").Status, rec.Progress)
	}
	if n := f.note(t, "r1"); n.Step != "two" || !strings.Contains(n.Error, "stuck at line-1") {
		t.Errorf("note %+v", n)
	}
}

// The handover note counts the keys and messages that stand: the verified steps' from the
// record (a message step's as messages), the stopped step's read back from its counter.
func TestHandoverNoteReadsBackTheStepsWrites(t *testing.T) {
	t.Parallel()
	f := setup(t)
	one := stepFunc(func(context.Context, *runner.Attempt) (*runner.Result, error) {
		return &runner.Result{Output: json.RawMessage(`{}`), Effects: &kc.Effects{Keys: 3}}, nil
	})
	three := &counted{
		run: func(context.Context, *runner.Attempt) (*runner.Result, error) { return nil, errBoom },
		progress: func() runner.Progress {
			return runner.Progress{Messages: 2, Standing: []string{"r1:m1", "r1:m2"}, Where: "the outbox", Next: "r1:m3"}
		},
	}
	f.run(t, f.config("one", one))
	f.run(t, f.config("two", output("two")))
	f.run(t, f.config("three", three))
	f.start(t, "r1")
	f.wait(t, "r1", handedOver)
	n := f.note(t, "r1")
	want := handover.Done{Keys: 3, Messages: 2, Steps: []handover.StepDone{
		{Step: "one", Keys: 3},
		{Step: "three", Messages: 2, ReadBack: true, Standing: []string{"r1:m1", "r1:m2"}, Where: "the outbox", Next: "r1:m3"},
	}}
	if fmt.Sprint(n.Done) != fmt.Sprint(want) {
		t.Errorf("note done %+v, want %+v", n.Done, want)
	}
	if three.counts.Load() != 1 {
		t.Errorf("counted %d times, want once (for the note)", three.counts.Load())
	}
}
