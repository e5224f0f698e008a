package runner_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/runner"
)

// An attempt's item events (what tests count across crashes: documents read, paid calls) are
// stored before the step's message is acked; only its step.verified and the next step's
// event may still be on their way.
func TestItemEventsStoredBeforeTheAck(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	r, err := runner.New(f.config("two", stepFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
		for i := range 5 {
			a.Audit("document.read", fmt.Sprintf("d%d", i), 0, nil)
		}
		return output("two")(ctx, a)
	})))
	if err != nil {
		t.Fatal(err)
	}
	f.publishTwo(t, "r1", f.readyForTwo(t, "r1"))
	cons, err := f.js.Consumer(ctx, assets.StreamSteps, "two")
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Next()
	if err != nil {
		t.Fatal(err)
	}
	r.Handle(ctx, m) // returns once the message is settled
	if n := count(f.audit(t, "r1"), "document.read", "two"); n != 5 {
		t.Errorf("%d document.read events stored when the message was acked, want 5", n)
	}
}

// Run returns only when the publishes its attempts did not wait for are answered: once it has
// returned, every leased step's step.verified is stored.
func TestRunReturnsWhenItsPublishesAreStored(t *testing.T) {
	f := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range toy.Names() {
		r, err := runner.New(f.config(s, output(s)))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if err := r.Run(ctx); err != nil {
				t.Errorf("runner %s: %v", s, err)
			}
		})
	}
	f.start(t, "r1")
	f.wait(t, "r1", finishing)
	cancel()
	wg.Wait()
	as := f.audit(t, "r1")
	for _, s := range toy.Names() {
		if n := count(as, "step.verified", s); n != auditedCommits(s) {
			t.Errorf("step %s: %d step.verified stored after Run returned, want %d", s, n, auditedCommits(s))
		}
	}
}

// auditedCommits is how many step.verified events a toy step's one commit publishes: none
// for the lease-free two, whose record is its timeline line.
func auditedCommits(step string) int {
	if step == "two" {
		return 0
	}
	return 1
}
