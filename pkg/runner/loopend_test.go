package runner_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/eventually"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/consume"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
)

// A step's durable deleted under its runner ends Run with an error (consume.ErrEnded,
// the cause, the consumer named) instead of leaving it idle; Ended hears of it at once,
// while the step in hand still runs; that step then gets its grace and is released like on
// a stop: lease gone, step pending.
func TestRunEndsWhenTheStepsDurableIsDeleted(t *testing.T) {
	for _, inHand := range []bool{false, true} {
		name := "idle"
		if inHand {
			name = "step in hand"
		}
		t.Run(name, func(t *testing.T) {
			f := setup(t)
			started := make(chan struct{}, 1)
			blocking := stepFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
				started <- struct{}{}
				<-ctx.Done()
				return nil, ctx.Err()
			})
			c := f.config("one", blocking)
			c.StopGrace = 200 * time.Millisecond
			c.Concurrency = 2 // the loop goes on pulling while the step is in hand
			ended := make(chan error, 1)
			leasedAtEnd := make(chan bool, 1)
			c.Ended = func(err error) {
				rec, _, lerr := f.store.Load(context.Background(), "r1")
				leasedAtEnd <- lerr == nil && rec.Lease != nil
				ended <- err
			}
			r, err := runner.New(c)
			if err != nil {
				t.Fatal(err)
			}
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx) }()
			if inHand {
				f.start(t, "r1")
				<-started
				f.wait(t, "r1", func(r *kc.Record) bool { return r.Lease != nil })
			} else {
				waitConsuming(t, f.js, "one")
			}

			if err := f.js.DeleteConsumer(context.Background(), assets.StreamSteps, "one"); err != nil {
				t.Fatal(err)
			}
			var runErr error
			select {
			case runErr = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("Run did not return within 30s of its durable's deletion")
			}
			if !errors.Is(runErr, consume.ErrEnded) {
				t.Fatalf("Run: %v, want consume.ErrEnded", runErr)
			}
			if !errors.Is(runErr, jetstream.ErrConsumerDeleted) && !errors.Is(runErr, jetstream.ErrConsumerNotFound) {
				t.Fatalf("Run: %v, want the cause (consumer deleted or not found)", runErr)
			}
			select {
			case err := <-ended:
				if err.Error() != runErr.Error() {
					t.Fatalf("Ended heard %v, Run returned %v", err, runErr)
				}
			default:
				t.Fatal("Ended was not called")
			}
			if !inHand {
				return
			}
			if !<-leasedAtEnd {
				t.Fatal("Ended was called after the step in hand had let its lease go, want before its grace")
			}
			rec, _, err := f.store.Load(context.Background(), "r1")
			if err != nil {
				t.Fatal(err)
			}
			if rec.Lease != nil || rec.Step("one").Status != kc.Pending || rec.Step("one").Attempts != 0 {
				t.Fatalf("after the end: lease %+v, step %+v; want released, pending, no failed attempt", rec.Lease, rec.Step("one"))
			}
		})
	}
}

// waitConsuming waits until the durable has a pull request waiting, so its loop is known
// to be consuming.
func waitConsuming(t *testing.T, js jetstream.JetStream, durable string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	eventually.That(t, time.Minute, "durable "+durable+": a pull request", func() error {
		c, err := js.Consumer(ctx, assets.StreamSteps, durable)
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumWaiting == 0 {
			return errors.New("none waiting")
		}
		return nil
	})
}
