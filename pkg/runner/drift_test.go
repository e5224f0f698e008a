package runner_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cairnhq/cairn/pkg/assets"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/runner"
)

// checkedToy is the toy pipeline whose steps after the first check the source.
var checkedToy = func() pipeline.Definition {
	d := pipeline.Definition{Name: toy.Name, Steps: slices.Clone(toy.Steps)}
	d.Steps[1].ChecksSource, d.Steps[2].ChecksSource = true, true
	return d
}()

// config is f.config for the pipeline whose later steps check the source.
func (f *fixture) checkedConfig(step string, impl runner.Step) runner.Config {
	c := f.config(step, impl)
	c.Pipeline = checkedToy
	return c
}

// checked is a step with a SourceChecker: check says what changed since the run read its
// source; calls counts the checks.
type checked struct {
	stepFunc
	changed []string
	calls   atomic.Int32
}

func (c *checked) CheckSource(context.Context, *runner.Attempt, string) ([]string, error) {
	c.calls.Add(1)
	return c.changed, nil
}

// reads is a first step that reads the source: its result sets the run's fingerprint.
func reads() stepFunc {
	return func(context.Context, *runner.Attempt) (*runner.Result, error) {
		return &runner.Result{Output: json.RawMessage(`{"step":"one"}`), SourceFingerprint: "sha256:aa"}, nil
	}
}

// writes counts its runs: the toy's outside write.
func writes(n *atomic.Int32) stepFunc {
	return func(context.Context, *runner.Attempt) (*runner.Result, error) {
		n.Add(1)
		return &runner.Result{Output: json.RawMessage(`{"step":"three"}`)}, nil
	}
}

// ended says the run went as far as it goes here.
func ended(r *kc.Record) bool {
	return r.Status == kc.HandedOver || r.Status == kc.Finishing || r.Status == kc.Done
}

// otherProcess is a checkpoint store of its own: a runner on it is another process.
func (f *fixture) otherProcess(t *testing.T) *kc.Store {
	t.Helper()
	s, err := kc.Open(context.Background(), f.js, assets.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// breakAfter waits until step is verified and writes the record once more (as the
// supervisor or a command would), so that the next step's event no longer names the
// revision it starts from: a break.
func (f *fixture) breakAfter(t *testing.T, runID, step string) {
	t.Helper()
	f.wait(t, runID, func(r *kc.Record) bool { return r.Step(step).Status == kc.Verified })
	if _, _, err := f.store.Mutate(context.Background(), runID, func(r *kc.Record) error {
		r.NextAction = "written between two steps"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// A lease-free step that starts after a break (the record written since the commit that
// scheduled it) checks the source and hands the run over naming the document; the
// writing step after it never runs.
func TestDriftLeaseFreeStepAfterABreak(t *testing.T) {
	f := setup(t)
	var wrote atomic.Int32
	two := &checked{stepFunc: output("two"), changed: []string{"INV-7 (changed)"}}
	f.run(t, f.config("one", reads()))
	f.start(t, "r1")
	f.breakAfter(t, "r1", "one")
	f.run(t, f.checkedConfig("two", two))
	f.run(t, f.config("three", writes(&wrote)))
	rec := f.wait(t, "r1", ended)
	if rec.Status != kc.HandedOver || rec.Step("two").Status != kc.Failed {
		t.Fatalf("run %s, step two %s; want handed over at two", rec.Status, rec.Step("two").Status)
	}
	if s := rec.Step("two"); s.LastError == nil || !strings.Contains(*s.LastError, "INV-7") || !strings.Contains(*s.LastError, runner.ErrSourceChanged.Error()) {
		t.Errorf("two's last error %v, want the changed source naming INV-7", s.LastError)
	}
	if n := wrote.Load(); n != 0 || two.calls.Load() != 1 {
		t.Errorf("three ran %d times and two checked %d times; want 0 and 1", n, two.calls.Load())
	}
}

// Steps handed on in the ordinary way check nothing on a night without breaks, whether
// they run in one process or in several (each its own store): the event of each step
// vouches for the commit it starts from (a checker that would refuse is never asked).
func TestDriftNoCheckWithoutABreak(t *testing.T) {
	for _, processes := range []string{"one process", "a process per step"} {
		t.Run(processes, func(t *testing.T) {
			f := setup(t)
			var wrote atomic.Int32
			two := &checked{stepFunc: output("two"), changed: []string{"INV-7 (changed)"}}
			three := &checked{stepFunc: writes(&wrote), changed: []string{"INV-7 (changed)"}}
			f.run(t, f.config("one", reads()))
			c2, c3 := f.checkedConfig("two", two), f.checkedConfig("three", three)
			if processes != "one process" {
				c2.Store, c3.Store = f.otherProcess(t), f.otherProcess(t)
			}
			f.run(t, c2)
			f.run(t, c3)
			f.start(t, "r1")
			rec := f.wait(t, "r1", ended)
			if rec.Status == kc.HandedOver || wrote.Load() != 1 {
				t.Fatalf("run %s, three wrote %d times; want it finished, written once", rec.Status, wrote.Load())
			}
			if two.calls.Load()+three.calls.Load() != 0 {
				t.Errorf("checks: two %d, three %d; want none", two.calls.Load(), three.calls.Load())
			}
		})
	}
}

// A break at a step that cannot check the source (no SourceChecker) leaves the check owed:
// the next step checks though nothing broke between the two, and the run is handed over
// before the write.
func TestDriftCheckOwedPastAStepWithoutChecker(t *testing.T) {
	f := setup(t)
	var wrote atomic.Int32
	three := &checked{stepFunc: writes(&wrote), changed: []string{"INV-7 (gone)"}}
	f.run(t, f.config("one", reads()))
	f.start(t, "r1")
	f.breakAfter(t, "r1", "one") // two starts after a break
	f.run(t, f.config("two", output("two")))
	f.run(t, f.checkedConfig("three", three))
	rec := f.wait(t, "r1", ended)
	if rec.Status != kc.HandedOver || rec.Step("three").Status != kc.Failed || wrote.Load() != 0 {
		t.Fatalf("run %s, three %s, written %d times; want handed over at three before its write", rec.Status, rec.Step("three").Status, wrote.Load())
	}
	if s := rec.Step("three"); s.LastError == nil || !strings.Contains(*s.LastError, "INV-7 (gone)") {
		t.Errorf("three's last error %v, want it naming INV-7", s.LastError)
	}
	if three.calls.Load() != 1 {
		t.Errorf("three checked %d times, want 1", three.calls.Load())
	}
}

// A step whose definition and implementation disagree about checking the source is refused.
func TestDriftDefinitionMustAgree(t *testing.T) {
	f := setup(t)
	if _, err := runner.New(f.config("two", &checked{stepFunc: output("two")})); err == nil {
		t.Error("a SourceChecker the definition does not declare: accepted")
	}
	if _, err := runner.New(f.checkedConfig("two", output("two"))); err == nil {
		t.Error("a declared source check without a SourceChecker: accepted")
	}
}
