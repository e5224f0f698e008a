package runner_test

import (
	"context"
	"testing"
	"time"

	"github.com/cairnhq/cairn/internal/stepevent"
	"github.com/cairnhq/cairn/pkg/assets"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
)

// A lease-free step whose run was taken by another (an undo's lease, after a cancel) while
// it ran does not commit over the holder: only the lease's holder writes a record it holds,
// and a record signed otherwise is not trusted by its readers. The step's work is left
// undone; a resume runs it again.
func TestLeaseFreeCommitLeavesAHeldRun(t *testing.T) {
	f := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	running, release := make(chan struct{}), make(chan struct{})
	f.run(t, f.config("two", stepFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
		close(running)
		<-release
		return output("two")(ctx, a)
	})))
	const runID = "run-held"
	rec := kc.New(runID, kc.StringParams(false, "warehouse", "w", "date", "2026-10-13"), toy.Names(), "2026-10-13T22:00:00Z")
	rec.Step("one").Status, rec.Step("one").Token = kc.Verified, kc.Ptr(uint64(1))
	rev, err := f.store.Create(ctx, rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := stepevent.Publish(ctx, f.js, assets.Default, "/cairn/test", runID, "two", 0, rev, time.Now()); err != nil {
		t.Fatal(err)
	}
	<-running
	undo := kc.Lease{Owner: "compensator/h/1-abcdef", OwnerInbox: "cairn.owner.compensator.x", Token: 9, Step: kc.UndoLease, WriteID: "w-1"}
	if _, _, err := f.store.Mutate(ctx, runID, func(r *kc.Record) error {
		r.Status, r.Lease = kc.Cancelled, &undo
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	close(release)
	cons, err := f.js.Consumer(ctx, assets.StreamSteps, "two")
	if err != nil {
		t.Fatal(err)
	}
	for {
		info, err := cons.Info(ctx)
		if err == nil && info.NumPending == 0 && info.NumAckPending == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("step two's event never settled: %+v, %v", info, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	got, _, err := f.store.Load(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Lease == nil || *got.Lease != undo || got.Step("two").Status == kc.Verified {
		t.Fatalf("lease %+v, two %s: want the undo's lease standing and two not verified", got.Lease, got.Step("two").Status)
	}
}
