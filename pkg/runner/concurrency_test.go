package runner_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/eventually"
	"github.com/cairnhq/cairn/internal/stepevent"
	"github.com/cairnhq/cairn/pkg/assets"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
)

// blocking is a step that announces each call and waits for a release.
type blocking struct {
	entered chan string
	release chan struct{}
	calls   atomic.Int32
}

func newBlocking() *blocking {
	return &blocking{entered: make(chan string, 16), release: make(chan struct{})}
}

func (b *blocking) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	b.calls.Add(1)
	b.entered <- a.RunID
	select {
	case <-b.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return output(a.Step)(ctx, a)
}

// readyForTwo creates a run whose step one is verified, so that step two may run, and
// returns the revision.
func (f *fixture) readyForTwo(t testing.TB, runID string) uint64 {
	t.Helper()
	ctx := context.Background()
	if _, err := f.store.Create(ctx, kc.New(runID, kc.StringParams(false, "warehouse", "w", "date", "2026-10-13"), toy.Names(), "2026-10-13T22:00:00Z")); err != nil {
		t.Fatal(err)
	}
	_, rev, err := f.store.Mutate(ctx, runID, func(r *kc.Record) error {
		r.Step("one").Status = kc.Verified
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

func (f *fixture) publishTwo(t testing.TB, runID string, rev uint64) {
	t.Helper()
	if err := stepevent.Publish(context.Background(), f.js, assets.Default, "/cairn/test", runID, "two", 0, rev, time.Now()); err != nil {
		t.Fatal(err)
	}
}

func receive(t *testing.T, c <-chan string) string {
	t.Helper()
	select {
	case id := <-c:
		return id
	case <-time.After(20 * time.Second):
		t.Fatal("the step was not called within 20s")
		return ""
	}
}

// With Concurrency 3, three runs are in the step at once.
func TestConcurrencyRunsRunsInParallel(t *testing.T) {
	f := setup(t)
	step := newBlocking()
	c := f.config("two", step)
	c.Concurrency = 3
	f.run(t, c)
	for _, id := range []string{"r1", "r2", "r3"} {
		f.publishTwo(t, id, f.readyForTwo(t, id))
	}
	in := map[string]bool{}
	for range 3 {
		in[receive(t, step.entered)] = true
	}
	if len(in) != 3 {
		t.Fatalf("runs in the step at once: %v, want r1, r2 and r3", in)
	}
	close(step.release)
	for _, id := range []string{"r1", "r2", "r3"} {
		f.wait(t, id, func(r *kc.Record) bool { return r.Step("two").Status == kc.Verified })
	}
}

// Two events of one run are never handled at once: the second waits until the first is
// settled, then finds the step verified and does not run it again.
func TestConcurrencyOneMessageOfARunAtATime(t *testing.T) {
	f := setup(t)
	step := newBlocking()
	c := f.config("two", step)
	c.Concurrency = 4
	f.run(t, c)
	rev := f.readyForTwo(t, "r1")
	f.publishTwo(t, "r1", rev)
	receive(t, step.entered)
	f.publishTwo(t, "r1", rev+1000) // a duplicate event under another id
	cons, err := f.js.Consumer(context.Background(), assets.StreamSteps, "two")
	if err != nil {
		t.Fatal(err)
	}
	// Both messages are in the runner's hands; only one is in the step.
	eventually.That(t, 20*time.Second, "two messages in hand", eventually.True(func() bool { return inHand(t, cons) == 2 }))
	select {
	case id := <-step.entered:
		t.Fatalf("a second message of %s entered the step while the first was in it", id)
	default:
	}
	close(step.release)
	f.wait(t, "r1", func(r *kc.Record) bool { return r.Step("two").Status == kc.Verified })
	eventually.That(t, 20*time.Second, "no message in hand", eventually.True(func() bool { return inHand(t, cons) == 0 }))
	if n := step.calls.Load(); n != 1 {
		t.Errorf("the step ran %d times, want 1", n)
	}
}

// inHand is how many of the consumer's messages are delivered and not yet settled.
func inHand(t *testing.T, c jetstream.Consumer) int {
	t.Helper()
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.NumAckPending
}

func TestConcurrencyBounds(t *testing.T) {
	f := setup(t)
	for _, n := range []int{-1, 1001} {
		c := f.config("two", output("two"))
		c.Concurrency = n
		if _, err := runner.New(c); err == nil {
			t.Errorf("Concurrency %d accepted", n)
		}
	}
}

// A step event names the revision this runner's store wrote, but another process wrote
// since: the remembered record is stale. The lease take on it is refused and the step is
// taken on the latest record at once; nothing the other writer wrote is lost.
func TestRememberedRecordThatMovedOn(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	rev, err := f.store.Create(ctx, kc.New("r1", kc.StringParams(false, "warehouse", "w", "date", "2026-10-13"), toy.Names(), "2026-10-13T22:00:00Z"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := kc.Open(ctx, f.js, assets.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := other.Mutate(ctx, "r1", func(r *kc.Record) error { r.AddRequest("req-1"); return nil }); err != nil {
		t.Fatal(err)
	}
	f.runAll(t, output("one"))
	if err := stepevent.Publish(ctx, f.js, assets.Default, "/cairn/test", "r1", "one", 0, rev, time.Now()); err != nil {
		t.Fatal(err)
	}
	rec := f.wait(t, "r1", finishing)
	if !rec.HasRequest("req-1") || rec.Restarts != 0 || rec.Step("one").Attempts != 0 {
		t.Errorf("requests %v, restarts %d, attempts %d; want req-1 kept, no restart, no failed attempt", rec.Requests, rec.Restarts, rec.Step("one").Attempts)
	}
	cons, err := f.js.Consumer(ctx, assets.StreamSteps, "one")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := cons.Info(ctx); err != nil || info.Delivered.Consumer != 1 {
		t.Errorf("step one's consumer delivered %d times (%v), want 1: the take was not retried at once", info.Delivered.Consumer, err)
	}
}

// With Concurrency above 1, a stop hands back every step in hand once its grace is over:
// each lease released, each step pending again, and Run returns.
func TestConcurrencyStop(t *testing.T) {
	f := setup(t)
	step := newBlocking()
	c := f.config("one", step)
	c.Concurrency = 3
	c.StopGrace = 200 * time.Millisecond
	r, err := runner.New(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	f.start(t, "r1")
	f.start(t, "r2")
	receive(t, step.entered)
	receive(t, step.entered)
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its grace")
	}
	for _, id := range []string{"r1", "r2"} {
		rec, _, err := f.store.Load(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Lease != nil || rec.Step("one").Status != kc.Pending {
			t.Errorf("%s after the stop: lease %+v, step %s; want released and pending", id, rec.Lease, rec.Step("one").Status)
		}
	}
}
