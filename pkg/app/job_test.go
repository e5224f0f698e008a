package app_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/faults"
	"github.com/cairnhq/cairn/pkg/fence"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/ratelimit"
	"github.com/cairnhq/cairn/pkg/runner"
	"github.com/cairnhq/cairn/pkg/undo"
)

// A step made by its kind declares what its implementation does: a write that raises fences
// is fenced (and so leased), one that checks the source says so; the definition names where
// a call memoises and a write's keys, which the runner requires.
func TestJobDeclaresFromTheImplementation(t *testing.T) {
	nop := runner.Func(func(context.Context, *runner.Attempt, struct{}) (int, error) { return 0, nil })
	write := &runner.Typed[struct{}, int]{Do: nop.Do,
		Verify:      func(context.Context, *runner.Attempt, struct{}, int) error { return nil },
		RaiseFences: func(context.Context, *runner.Attempt, fence.Token) error { return nil },
		CheckSource: func(context.Context, *runner.Attempt, string) ([]string, error) { return nil, nil }}
	job := app.Job{Name: "decl", Steps: []app.Step{
		app.Read("read", nop), app.Call("ask", nop), app.Compute("sum", nop).After("ask"), app.Write("put", write), app.Message("tell", nop),
	}}
	d := job.Pipeline()
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	step := func(name string) pipeline.Step { s, _ := d.Step(name); return s }
	if s := step("put"); !s.Fenced || !s.Leased || !s.ChecksSource || s.Kind != pipeline.BusinessWrite || s.Key == "" || s.Compensation != "" {
		t.Errorf("put: %+v, want a fenced, leased business write that checks the source and names its keys, and no compensation (no systems)", s)
	}
	job.Systems = map[string]undo.System{"books": undo.SQL{}}
	if s, _ := job.Pipeline().Step("put"); !strings.Contains(s.Compensation, "the job's: books") {
		t.Errorf("put's compensation with a system registered: %q", s.Compensation)
	}
	if s := step("ask"); s.Leased || s.Kind != pipeline.ModelCall || !strings.Contains(s.Memo, "cairn-decl-memo") {
		t.Errorf("ask: %+v, want a lease-free model call memoised in cairn-decl-memo", s)
	}
	if s := step("read"); s.Leased || s.Fenced || s.ChecksSource || s.Kind != pipeline.SourceRead {
		t.Errorf("read: %+v, want a lease-free source read", s)
	}
	if s := step("tell"); !s.Leased || !s.Irreversible || s.Kind != pipeline.OutsideMessage {
		t.Errorf("tell: %+v, want a leased, irreversible message step", s)
	}
	if got := d.Waits("sum"); !slices.Equal(got, []string{"ask"}) {
		t.Errorf("sum waits for %v, want [ask]", got)
	}
	if ab := runner.AbilitiesOf(write); !ab.Fences || !ab.Verifies || !ab.ChecksSource || ab.Plans || ab.CountsProgress {
		t.Errorf("the write's abilities: %+v", ab)
	}
	if ab := runner.AbilitiesOf(nop); ab != (runner.Abilities{}) {
		t.Errorf("a bare Func's abilities: %+v, want none", ab)
	}
}

// A Config names a job's steps once: a Job beside a Pipeline or Steps, or a step of it
// without an implementation, is refused by name before anything is made.
func TestJobGivenTwiceRefused(t *testing.T) {
	js := natsFor(t)
	keys := filepath.Join(t.TempDir(), "keys")
	twice := app.Config{JS: js, KeysDir: keys, Job: greet, Pipeline: greet.Pipeline()}
	if err := app.Init(t.Context(), twice); err == nil || !strings.Contains(err.Error(), "both a Job and a Pipeline") {
		t.Errorf("Init of a Job beside its Pipeline: %v", err)
	}
	empty := greet
	empty.Steps = []app.Step{greet.Steps[0], {Step: pipeline.Step{Name: "shout", Kind: pipeline.Compute}}}
	if err := app.Run(t.Context(), app.Config{JS: js, KeysDir: keys, Job: empty}); err == nil || !strings.Contains(err.Error(), `step "shout" has no implementation`) {
		t.Errorf("Run of a step with no implementation: %v", err)
	}
	withSystem := greet
	withSystem.Systems = map[string]undo.System{"mail-house": undo.HTTP{}}
	if err := app.Init(t.Context(), app.Config{JS: js, KeysDir: keys, Job: withSystem, Systems: map[string]undo.System{"mail-house": undo.HTTP{}}}); err == nil || !strings.Contains(err.Error(), `system "mail-house" is both the Job's and the Config's`) {
		t.Errorf("Init of a system named twice: %v", err)
	}
	if _, err := jetstream.JetStream.Stream(js, t.Context(), "CAIRN_GREET_STEPS"); err == nil {
		t.Error("a refused Config made the job's streams")
	}
}

// calls counts an outside system's calls, by item.
type calls struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *calls) call(item string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[item]++
}

func (c *calls) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

// order is a typed job's input.
type order struct {
	Items []string `json:"items"`
}

// typedJob splits an order, asks a memoised price per item (counted in c), parks the item
// "bad", counts the items in a join of two steps, and totals. With stopped, the price step
// closes it at its third item once and waits for its attempt's end, as a process stopped
// mid-step.
func typedJob(c *calls, stopped chan<- struct{}) app.Job {
	var once sync.Once
	split := runner.Func(func(ctx context.Context, a *runner.Attempt, in order) ([]string, error) {
		a.Fingerprint("sha256:order")
		a.Next("price each item")
		return in.Items, nil
	})
	price := runner.Func(func(ctx context.Context, a *runner.Attempt, items []string) (map[string]int, error) {
		out := map[string]int{}
		for i, it := range items {
			if it == "bad" {
				a.Park(it, "no such item")
				continue
			}
			if i == 2 && stopped != nil {
				var wait bool
				once.Do(func() { wait = true })
				if wait { // the process stops here, mid-step, its first two calls memoised
					close(stopped)
					<-ctx.Done()
					return nil, ctx.Err()
				}
			}
			p, err := runner.Memo(ctx, a, "price."+it, func(ctx context.Context) (int, error) {
				c.call(it)
				return 10 * len(it), nil
			})
			if err != nil {
				return nil, err
			}
			out[it] = p
		}
		return out, nil
	})
	count := runner.Func(func(ctx context.Context, a *runner.Attempt, items []string) (int, error) { return len(items), nil })
	total := runner.Func(func(ctx context.Context, a *runner.Attempt, in struct {
		Price map[string]int `json:"price"`
		Count int            `json:"count"`
	}) (string, error) {
		items, err := runner.In[[]string](ctx, a, "split")
		if err != nil {
			return "", err
		}
		sum := 0
		for _, p := range in.Price {
			sum += p
		}
		return fmt.Sprintf("%d of %d items priced, %d in all (%s first)", len(in.Price), in.Count, sum, items[0]), nil
	})
	return app.Job{Name: "typed", Input: []string{"items"}, Steps: []app.Step{
		app.Read("split", split),
		app.Call("price", price).After("split"),
		app.Compute("count", count).After("split"),
		app.Compute("total", total).After("price", "count"),
	}}
}

// A typed step reads what it waits for as a Go value (the run's input, one step's output, a
// join's as an object by step name, another step's with runner.In) and tells the record its
// parked items, its count, its next action and the source's fingerprint.
func TestTypedStepsReadAndTell(t *testing.T) {
	c := &calls{}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	local, err := app.RunLocal(ctx, t.TempDir(), typedJob(c, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	if err := local.Start(ctx, "o-1", order{Items: []string{"tea", "bad", "sugar", "milk"}}); err != nil {
		t.Fatal(err)
	}
	var total string
	if err := local.Output(ctx, "o-1", "total", &total); err != nil {
		t.Fatal(err)
	}
	if want := "3 of 4 items priced, 120 in all (tea first)"; total != want {
		t.Errorf("total: %q, want %q", total, want)
	}
	rec, err := local.Wait(ctx, "o-1")
	if err != nil {
		t.Fatal(err)
	}
	price := rec.Step("price")
	if price.ParkedCount != 1 || len(price.Parked) != 1 || price.Parked[0].Item != "bad" || price.Parked[0].Reason != "no such item" {
		t.Errorf("price parked %d: %+v, want the item bad", price.ParkedCount, price.Parked)
	}
	if rec.SourceFingerprint == nil || *rec.SourceFingerprint != "sha256:order" {
		t.Errorf("the run's source fingerprint: %v, want split's", rec.SourceFingerprint)
	}
	if got := c.counts(); !maps.Equal(got, map[string]int{"tea": 1, "sugar": 1, "milk": 1}) {
		t.Errorf("calls %v, want one per item priced", got)
	}
}

// A job hosted by RunLocal and stopped in the middle of a step resumes when it is hosted
// again on the same dir: the run ends done, and no call answered before the stop is made
// again.
func TestRunLocalResumesAfterAStop(t *testing.T) {
	c := &calls{}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	stopped := make(chan struct{})
	job := typedJob(c, stopped)
	short := func(c *app.Config) { c.StopGrace = 100 * time.Millisecond }
	local, err := app.RunLocal(ctx, dir, job, short)
	if err != nil {
		t.Fatal(err)
	}
	if err := local.Start(ctx, "o-1", order{Items: []string{"tea", "sugar", "milk", "salt"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stopped:
	case <-ctx.Done():
		t.Fatal("the price step never reached its third item")
	}
	if again, err := app.RunLocal(ctx, dir, job); err == nil {
		again.Close()
		t.Fatal("a second RunLocal on a dir in use was not refused")
	}
	if err := local.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := c.counts(); !maps.Equal(got, map[string]int{"tea": 1, "sugar": 1}) {
		t.Fatalf("calls before the stop %v, want tea and sugar once", got)
	}
	local, err = app.RunLocal(ctx, dir, job, short)
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	var total string
	if err := local.Output(ctx, "o-1", "total", &total); err != nil {
		t.Fatal(err)
	}
	if want := "4 of 4 items priced, 160 in all (tea first)"; total != want {
		t.Errorf("total: %q, want %q", total, want)
	}
	if got := c.counts(); !maps.Equal(got, map[string]int{"tea": 1, "sugar": 1, "milk": 1, "salt": 1}) {
		t.Errorf("calls %v, want each item once across the stop", got)
	}
}

// Memo's calls are the step's fault points: an injected temporary fault before the second
// call fails the attempt there, and the next attempt asks only what was not answered.
func TestMemoFiresTheItemLoopsFaultPoints(t *testing.T) {
	c := &calls{}
	dir := t.TempDir()
	fs, err := faults.Parse("price."+faults.BeforeWrite+".2=error:temporary@once", filepath.Join(dir, "faults"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	local, err := app.RunLocal(ctx, dir, typedJob(c, nil), func(c *app.Config) { c.Faults = fs })
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	if err := local.Start(ctx, "o-1", order{Items: []string{"tea", "sugar", "milk"}}); err != nil {
		t.Fatal(err)
	}
	rec, err := local.Wait(ctx, "o-1")
	if err != nil || rec.Status != kc.Done {
		t.Fatalf("o-1: %v, %v; want done", rec, err)
	}
	if e := rec.Step("price").LastError; e == nil || !strings.Contains(*e, "injected temporary fault") {
		t.Errorf("price's last error: %v, want the injected fault at its second call (the attempt failed there, the next did the rest)", e)
	}
	if got := c.counts(); !maps.Equal(got, map[string]int{"tea": 1, "sugar": 1, "milk": 1}) {
		t.Errorf("calls %v, want each item once: the first answer memoised before the fault", got)
	}
}

// A step's declared rate limit is kept by the runner: each call Memo makes books a slot of
// the limit first (one booking written in the limit's key per call), and a memoised answer
// books none.
func TestMemoWaitsForTheStepsLimit(t *testing.T) {
	c := &calls{}
	job := typedJob(c, nil)
	job.Steps[1].RateLimit = "TYPED_PRICE_RPS"
	limit := ratelimit.Limit{Bucket: assets.MustSpace("typed").Bucket(assets.BucketLimits), Key: "price", PerSecond: 1000}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	local, err := app.RunLocal(ctx, t.TempDir(), job, func(c *app.Config) {
		c.Limits = map[string]ratelimit.Limit{"TYPED_PRICE_RPS": limit}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	for run, items := range map[string][]string{"o-1": {"tea", "sugar", "milk"}, "o-2": {"milk", "tea", "sugar"}} { // memos are a run's own
		if err := local.Start(ctx, run, order{Items: items}); err != nil {
			t.Fatal(err)
		}
		if rec, err := local.Wait(ctx, run); err != nil || rec.Status != kc.Done {
			t.Fatalf("%s: %v, %v; want done", run, rec, err)
		}
	}
	kv, err := local.JS().KeyValue(ctx, limit.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, limit.Key)
	if err != nil {
		t.Fatalf("the limit's key: %v (no call booked a slot)", err)
	}
	if got := e.Revision(); got != 6 {
		t.Errorf("the limit's key is at revision %d, want 6: a booking for each of the 6 calls made", got)
	}
	if got := c.counts(); !maps.Equal(got, map[string]int{"tea": 2, "sugar": 2, "milk": 2}) {
		t.Errorf("calls %v, want each item once a run", got)
	}
}

// A job that names no CheckInput refuses a start without a member of its Input, with one
// it does not take, or with one the first step cannot read as its input, naming each.
func TestJobChecksItsInputByDefault(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	local, err := app.RunLocal(ctx, t.TempDir(), typedJob(&calls{}, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	for run, tc := range map[string]struct {
		input any
		wants []string
	}{
		"o-missing": {map[string]any{"item": "tea"}, []string{`unknown member "item" (the job takes items)`, `"items" is missing`}},
		"o-null":    {map[string]any{"items": nil}, []string{`"items" is missing`}},
		"o-type":    {map[string]any{"items": 5}, []string{"the input is no app_test.order", "cannot unmarshal number"}},
	} {
		err := local.Start(ctx, run, tc.input)
		var refused *app.Refused
		if !errors.As(err, &refused) {
			t.Errorf("%s: %v, want a refusal", run, err)
			continue
		}
		for _, w := range tc.wants {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s refused: %v, want it to say %q", run, err, w)
			}
		}
	}
	if err := local.Start(ctx, "o-good", order{Items: []string{"tea"}}); err != nil {
		t.Errorf("a good start: %v", err)
	}
}
