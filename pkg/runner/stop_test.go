package runner_test

import (
	"context"
	"errors"
	"testing"
	"time"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
)

// On stop (SIGTERM) the step in hand has its grace; one that does not finish in it is
// stopped: its lease released, the step pending again, and Run returns nil. Another
// instance then takes the step from its message, handed back.
func TestStopReleasesTheStepInHandAfterItsGrace(t *testing.T) {
	f := setup(t)
	started := make(chan struct{}, 1)
	blocking := stepFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
		started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	c := f.config("one", blocking)
	c.StopGrace = 200 * time.Millisecond
	r, err := runner.New(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	f.start(t, "r1")
	<-started
	f.wait(t, "r1", func(r *kc.Record) bool { return r.Lease != nil })

	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its grace")
	}
	rec, _, err := f.store.Load(context.Background(), "r1")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Lease != nil || rec.Step("one").Status != kc.Pending || rec.Step("one").Attempts != 0 {
		t.Fatalf("after the stop: lease %+v, step %+v; want released, pending, no failed attempt", rec.Lease, rec.Step("one"))
	}

	// Another instance finishes the run from the handed-back message.
	f.runAll(t, output("one"))
	rec = f.wait(t, "r1", finishing)
	if rec.Restarts != 0 {
		t.Errorf("restarts %d: a stop is not a crash", rec.Restarts)
	}
}

// A step that finishes within its grace commits as usual.
func TestStopLetsTheStepInHandFinish(t *testing.T) {
	f := setup(t)
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	slow := stepFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
		started <- struct{}{}
		select {
		case <-release:
			return &runner.Result{Output: []byte(`{"step":"one"}`)}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	c := f.config("one", slow)
	c.StopGrace = time.Minute
	r, err := runner.New(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	f.start(t, "r1")
	<-started
	stop()
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) with a step in hand", err)
	default:
	}
	close(release)
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	rec := f.wait(t, "r1", func(r *kc.Record) bool { return r.Step("one").Status == kc.Verified })
	if rec.Lease != nil {
		t.Fatalf("lease %+v after the commit", rec.Lease)
	}
}

// A stop that comes while the runner is still starting (before it found its consumer) is a
// clean stop too: Run returns nil, as a process stopped at once after its start expects.
func TestStopBeforeTheConsumerIsFound(t *testing.T) {
	f := setup(t)
	r, err := runner.New(f.config("one", output("one")))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	stop()
	if err := r.Run(ctx); err != nil {
		t.Errorf("Run after a stop at its start: %v, want nil", err)
	}
}
