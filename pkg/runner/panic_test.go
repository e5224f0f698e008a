package runner_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnhq/cairn/pkg/assets"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
)

// A step that panics hands its run over instead of crashing the worker: the record says
// handed_over with the step failed and no lease, the note names the panic, the event is
// termed (not delivered again), and the same worker goes on with the next run.
func TestPanicHandsOverAndTheWorkerGoesOn(t *testing.T) {
	f := setup(t)
	var calls atomic.Int32
	step := stepFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
		if a.RunID == "run-p" {
			calls.Add(1)
			var m map[string]int
			m["boom"]++ // a bug: a nil map
		}
		return output("one")(ctx, a)
	})
	f.run(t, f.config("one", step))
	f.start(t, "run-p")
	rec := f.wait(t, "run-p", func(r *kc.Record) bool { return r.Status == kc.HandedOver })
	if s := rec.Step("one"); s.Status != kc.Failed || s.LastError == nil || rec.Lease != nil || rec.Handover == nil || *rec.Handover != "run-p:handover:one:panic" {
		t.Fatalf("record after the panic: status %s, step %+v, lease %+v, handover %v", rec.Status, s, rec.Lease, rec.Handover)
	}
	e, err := f.handovers.Get(context.Background(), "run-p")
	if err != nil {
		t.Fatal(err)
	}
	var note runner.HandoverNote
	if err := json.Unmarshal(e.Value(), &note); err != nil || note.ID != "run-p:handover:one:panic" || note.RunID != "run-p" {
		t.Fatalf("handover note %s (%v)", e.Value(), err)
	}
	f.start(t, "run-q")
	f.wait(t, "run-q", func(r *kc.Record) bool { return r.Step("one").Status == kc.Verified })
	cons, err := f.js.Consumer(context.Background(), assets.StreamSteps, "one")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		info, err := cons.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending == 0 && info.NumPending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("step consumer: %d pending ack, %d pending; want every event settled", info.NumAckPending, info.NumPending)
		}
		<-tick.C
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the panicking step ran %d times, want once (its event termed)", n)
	}
}
