package supervisor

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/outbox"
)

var worker = kc.Owner{Name: "a/host/1", Inbox: "cairn.owner.a.one0000000000000000000"}

// released checks that the run's lease was released by the supervisor at revision rev > after,
// audited as reassigned, and that the step's event was published with that revision.
func (f *fixture) released(t *testing.T, runID, step string, after uint64, why string) uint64 {
	t.Helper()
	rec, rev := f.load(t, runID)
	if rec.Lease != nil || rev <= after {
		t.Fatalf("lease %+v at revision %d (lease taken at %d), want released", rec.Lease, rev, after)
	}
	st := rec.Step(step)
	if st.Status != kc.InProgress || st.LastError == nil || !strings.Contains(*st.LastError, why) {
		t.Fatalf("step %s: %s, last_error %v; want in_progress with %q", step, st.Status, st.LastError, why)
	}
	if rec.Status != kc.Running {
		t.Fatalf("status %s", rec.Status)
	}
	stepEvent(t, f.published(t), runID, step, rev, rec.Generation)
	f.nonePublished(t)
	if ids := f.auditIDs(t, runID, "reassigned"); !slices.Equal(ids, []string{events.AuditStepID(runID, step, "reassigned", rev)}) {
		t.Fatalf("reassigned audit ids %v", ids)
	}
	return rev
}

// untouched checks that the run is at revision rev and nothing was published.
func (f *fixture) untouched(t *testing.T, runID string, rev uint64) {
	t.Helper()
	if rec, got := f.load(t, runID); got != rev {
		t.Fatalf("revision %d, want %d (lease %+v)", got, rev, rec.Lease)
	}
	f.nonePublished(t)
}

// alive answers on owner's inbox, as a living process does.
func (f *fixture) alive(t *testing.T, owner kc.Owner) {
	t.Helper()
	sub, err := f.nc.Subscribe(owner.Inbox, func(m *nats.Msg) { _ = m.Respond(nil) })
	if err != nil {
		t.Fatalf("answering on the owner inbox: %v", err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// A living owner that stopped renewing (a stopped process) keeps its lease until it expires.
func TestSweepReleasesALeaseUnchangedForTheLeaseDuration(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.alive(t, worker)
	f.create(t, "r1", nil)
	f.take(t, "r1", "a", worker)
	_, taken := f.load(t, "r1")
	f.observeAll(t, s)

	s.SweepOnce(f.ctx, false)
	f.untouched(t, "r1", taken)
	f.clock.Advance(testLease - time.Millisecond)
	s.SweepOnce(f.ctx, false)
	f.untouched(t, "r1", taken)

	f.clock.Advance(time.Millisecond)
	s.SweepOnce(f.ctx, false)
	f.released(t, "r1", "a", taken, "expired")
}

func TestSweepKeepsARenewedLease(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.alive(t, worker)
	f.create(t, "r1", nil)
	h := f.take(t, "r1", "a", worker)
	f.observeAll(t, s)
	s.SweepOnce(f.ctx, false)

	f.clock.Advance(testLease / 2)
	if err := h.Renew(f.ctx); err != nil {
		t.Fatalf("renewing: %v", err)
	}
	_, renewed := f.load(t, "r1")
	f.observeAll(t, s)
	s.SweepOnce(f.ctx, false) // sees the new write_id: the lease's age starts again

	f.clock.Advance(testLease - time.Millisecond) // 1.5 leases since taken, not one since renewed
	s.SweepOnce(f.ctx, false)
	f.untouched(t, "r1", renewed)
	if err := h.Renew(f.ctx); err != nil {
		t.Fatalf("the holder renewing again: %v", err)
	}
	_, renewed = f.load(t, "r1")

	// The supervisor's view is stale (it saw the first renewal only): by its clock that lease is
	// now expired, but the release is a compare-and-set on it and leaves the live lease alone.
	f.clock.Advance(time.Millisecond)
	s.SweepOnce(f.ctx, false)
	f.untouched(t, "r1", renewed)
	if err := h.Renew(f.ctx); err != nil {
		t.Fatalf("the holder fenced by a release of a lease it had renewed: %v", err)
	}
}

func TestSweepAtStartupReleasesTheLeaseOfAGoneOwner(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.create(t, "r1", nil)
	f.take(t, "r1", "a", kc.Owner{Name: "a/host/1", Inbox: "cairn.owner.a.gone000000000000000000"})
	_, taken := f.load(t, "r1")
	f.observeAll(t, s)

	s.SweepOnce(f.ctx, true) // the clock has not moved: only the owner's silence counts

	f.released(t, "r1", "a", taken, "gone")
}

// An owner that stopped renewing is asked after two heartbeats; proven gone, its lease is
// released at once, long before it would expire.
func TestSweepReleasesTheLeaseOfAGoneOwnerAfterTwoHeartbeats(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.create(t, "r1", nil)
	f.take(t, "r1", "a", kc.Owner{Name: "a/host/1", Inbox: "cairn.owner.a.gone000000000000000000"})
	_, taken := f.load(t, "r1")
	f.observeAll(t, s)
	s.SweepOnce(f.ctx, false)
	f.clock.Advance(2*testLease/3 - time.Millisecond)
	s.SweepOnce(f.ctx, false)
	f.untouched(t, "r1", taken)

	f.clock.Advance(time.Millisecond) // two heartbeats (lease/3 each) without a renewal
	s.SweepOnce(f.ctx, false)
	f.released(t, "r1", "a", taken, "gone")
}

func TestSweepAtStartupKeepsTheLeaseOfALiveOwner(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	sub, err := f.nc.Subscribe(worker.Inbox, func(m *nats.Msg) { _ = m.Respond(nil) })
	if err != nil {
		t.Fatalf("answering on the owner inbox: %v", err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	f.create(t, "r1", nil)
	f.take(t, "r1", "a", worker)
	_, taken := f.load(t, "r1")
	f.observeAll(t, s)

	s.SweepOnce(f.ctx, true)

	f.untouched(t, "r1", taken)
}

func TestSweepRepublishesAStepWithNoLeaseAndNoEvent(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	created := f.create(t, "r1", func(r *kc.Record) { r.Generation = 1 })
	f.observeAll(t, s)

	s.SweepOnce(f.ctx, false)
	f.clock.Advance(testLease - time.Millisecond)
	s.SweepOnce(f.ctx, false)
	f.untouched(t, "r1", created)

	f.clock.Advance(time.Millisecond)
	s.SweepOnce(f.ctx, false)

	rec, rev := f.load(t, "r1")
	if rev <= created || rec.Lease != nil || rec.Status != kc.Running || !strings.Contains(rec.NextAction, "published again") {
		t.Fatalf("revision %d (created %d), lease %v, status %s, next_action %q; want a write of its own first", rev, created, rec.Lease, rec.Status, rec.NextAction)
	}
	stepEvent(t, f.published(t), "r1", "a", rev, 1)
	f.nonePublished(t)
	if ids := f.auditIDs(t, "r1", "republished"); !slices.Equal(ids, []string{events.AuditStepID("r1", "a", "republished", rev)}) {
		t.Fatalf("republished audit ids %v", ids)
	}

	// The event is stored now: later sweeps leave the run alone.
	f.observeAll(t, s)
	s.SweepOnce(f.ctx, false)
	f.clock.Advance(2 * testLease)
	s.SweepOnce(f.ctx, false)
	f.untouched(t, "r1", rev)
}

func TestSweepRepublishesTheSuccessorOfAVerifiedStep(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	created := f.create(t, "r1", func(r *kc.Record) { r.Step("a").Status = kc.Verified })
	f.observeAll(t, s)

	s.SweepOnce(f.ctx, true) // at startup there is no wait

	rec, rev := f.load(t, "r1")
	if rev <= created || rec.Step("b").Status != kc.Pending {
		t.Fatalf("revision %d (created %d), b %s", rev, created, rec.Step("b").Status)
	}
	stepEvent(t, f.published(t), "r1", "b", rev, 0)
	f.nonePublished(t)
}

func TestSweepLeavesAStepWhoseEventIsStored(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.command(t, s, events.RunStartSubject, startR1)
	_, rev := f.load(t, "r1")
	f.published(t)
	f.observeAll(t, s)

	s.SweepOnce(f.ctx, true)
	f.clock.Advance(testLease)
	s.SweepOnce(f.ctx, false)

	f.untouched(t, "r1", rev)
}

func TestSweepLeavesRunsThatAreNotRunning(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	revs := map[string]uint64{}
	for _, st := range []kc.Status{kc.Cancelled, kc.HandedOver, kc.WaitingApproval, kc.Done} {
		id := strings.ReplaceAll(string(st), "_", "-")
		revs[id] = f.create(t, id, func(r *kc.Record) {
			r.Status = st
			if st == kc.WaitingApproval { // a run waits on a plan (Record.Check)
				r.Approval = &kc.Approval{Step: "c", PlanDigest: "sha256:plan", Since: r.CreatedAt}
			}
		})
	}
	f.observeAll(t, s)

	s.SweepOnce(f.ctx, true)
	f.clock.Advance(2 * testLease)
	s.SweepOnce(f.ctx, false)

	for id, rev := range revs {
		f.untouched(t, id, rev)
	}
}

// queue puts a message of the run on the outbox, as a step does.
func (f *fixture) queue(t *testing.T, runID, kind string, generation int) string {
	t.Helper()
	m := outbox.Message{
		Key: runID + ":" + kind, RunID: runID, Kind: kind, Step: "c", Generation: generation, Token: 7,
		From: "cairn@example.com", To: []string{"ops@example.com"}, Subject: kind, Body: "hello",
		QueuedAt: f.clock.Now(),
	}
	if err := outbox.Queue(f.ctx, f.js, m); err != nil {
		t.Fatalf("queueing %s: %v", m.Key, err)
	}
	return m.Key
}

func (f *fixture) mark(t *testing.T, runID, key string, mark outbox.Mark) {
	t.Helper()
	if _, err := f.marks.Put(f.ctx, outbox.MarkKey(runID, key), []byte(mark)); err != nil {
		t.Fatalf("marking %s: %v", key, err)
	}
}

func finishing(generation int) func(r *kc.Record) {
	return func(r *kc.Record) {
		r.Status = kc.Finishing
		r.Generation = generation
		for _, s := range r.Pipeline {
			r.Step(s).Status = kc.Verified
		}
	}
}

func TestSweepMarksAFinishingRunDoneOnceItsMailIsSent(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	created := f.create(t, "r1", finishing(1))
	debit := f.queue(t, "r1", "debit", 1)
	report := f.queue(t, "r1", "report", 1)
	f.queue(t, "r1", "withdraw", 0) // an older generation's message does not hold the run
	f.mark(t, "r1", debit, outbox.Sent)
	f.mark(t, "r1", report, outbox.Sending)
	f.observeAll(t, s)

	s.SweepOnce(f.ctx, false)
	if rec, rev := f.load(t, "r1"); rev != created || rec.Status != kc.Finishing {
		t.Fatalf("with a message not sent: status %s revision %d, want finishing at %d", rec.Status, rev, created)
	}

	f.mark(t, "r1", report, outbox.Sent)
	s.SweepOnce(f.ctx, false)

	rec, rev := f.load(t, "r1")
	if rec.Status != kc.Done || rev <= created || rec.Lease != nil {
		t.Fatalf("status %s revision %d lease %v, want done", rec.Status, rev, rec.Lease)
	}
	if ids := f.auditIDs(t, "r1", "run.done"); !slices.Equal(ids, []string{events.AuditStepID("r1", "run", "done", rev)}) {
		t.Fatalf("run.done audit ids %v", ids)
	}
	f.nonePublished(t)

	// Settling again is harmless.
	done, err := Settle(f.ctx, f.js, assets.Default, f.store, f.marks, "r1", f.clock.Now)
	if err != nil || !done {
		t.Fatalf("Settle of a done run: %v, %v; want true", done, err)
	}
	if _, rev2 := f.load(t, "r1"); rev2 != rev {
		t.Fatalf("Settle of a done run wrote revision %d", rev2)
	}
}

func TestSettleCountsCancelledMessagesAsSettled(t *testing.T) {
	f := setup(t)
	f.create(t, "r1", finishing(0))
	f.mark(t, "r1", f.queue(t, "r1", "debit", 0), outbox.Cancelled)

	done, err := Settle(f.ctx, f.js, assets.Default, f.store, f.marks, "r1", f.clock.Now)
	if err != nil || !done {
		t.Fatalf("Settle: %v, %v; want done", done, err)
	}
	if rec, _ := f.load(t, "r1"); rec.Status != kc.Done {
		t.Fatalf("status %s", rec.Status)
	}
}

func TestSettleWithoutMessagesIsDone(t *testing.T) {
	f := setup(t)
	f.create(t, "r1", finishing(0))
	done, err := Settle(f.ctx, f.js, assets.Default, f.store, f.marks, "r1", f.clock.Now)
	if err != nil || !done {
		t.Fatalf("Settle: %v, %v; want done", done, err)
	}
}
