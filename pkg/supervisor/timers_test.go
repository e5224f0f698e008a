package supervisor

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/outbox"
)

// clocked has the fixture's records written by a store whose clock is the test clock moved
// by skew, as a writer's clock would be, so progressed_at and approval.since are test times.
func (f *fixture) clocked(t *testing.T, skew time.Duration) {
	t.Helper()
	store, err := kc.Open(f.ctx, f.js, assets.BucketRuns, kc.WithClock(func() time.Time { return f.clock.Now().Add(skew) }))
	if err != nil {
		t.Fatalf("opening the store: %v", err)
	}
	f.store = store
}

// restarted is a new supervisor that has just read every record, as a restarted one does.
func (f *fixture) restarted(t *testing.T) *Supervisor {
	t.Helper()
	s := f.supervisor(t)
	f.observeAll(t, s)
	s.SweepOnce(f.ctx, true)
	return s
}

// status fails the test unless the run's status is want.
func (f *fixture) status(t *testing.T, runID string, want kc.Status, when string) {
	t.Helper()
	if rec, _ := f.load(t, runID); rec.Status != want {
		t.Fatalf("%s: status %s, want %s", when, rec.Status, want)
	}
}

// A supervisor restarted 23 h into a 24 h approval hands the run over at 24 h (counted from
// approval.since), not 24 h after the restart.
func TestApprovalTimeoutSurvivesARestart(t *testing.T) {
	f := setup(t)
	f.clocked(t, 0)
	first := f.supervisor(t)
	f.waiting(t, "r1")
	f.observeAll(t, first)
	f.clock.Advance(23 * time.Hour)
	first.SweepOnce(f.ctx, false)
	f.status(t, "r1", kc.WaitingApproval, "23 h into the wait")

	s := f.restarted(t)
	f.status(t, "r1", kc.WaitingApproval, "restarted 23 h into the wait")
	f.clock.Advance(time.Hour - time.Second)
	s.SweepOnce(f.ctx, false)
	f.status(t, "r1", kc.WaitingApproval, "a second before the approval timeout")
	f.clock.Advance(time.Second)
	s.SweepOnce(f.ctx, false)
	f.handedOver(t, "r1", "c", "CAIRN_APPROVAL_TIMEOUT")
}

// The same with the supervisor's own Run: the one started after the first stops finds the
// wait 23 h old and ends it an hour later.
func TestApprovalTimeoutSurvivesARestartOfRun(t *testing.T) {
	f := setup(t)
	f.clocked(t, 0)
	f.waiting(t, "r1")
	run := func(s *Supervisor) (stop func()) {
		ctx, cancel := context.WithCancel(f.ctx)
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		select {
		case <-s.Ready():
		case err := <-done:
			t.Fatalf("Run ended before it was ready: %v", err)
		case <-f.ctx.Done():
			t.Fatal("Run never got ready")
		}
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}
	stop := run(f.supervisor(t))
	f.clock.Advance(23 * time.Hour)
	stop()

	stop = run(f.supervisor(t)) // ready once its startup sweep is done
	defer stop()
	f.status(t, "r1", kc.WaitingApproval, "restarted 23 h into the wait")
	ctx, cancel := context.WithTimeout(f.ctx, 20*time.Second)
	defer cancel()
	w, err := f.store.KV().Watch(ctx, "r1", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	f.clock.Advance(time.Hour)
	for rec, _ := f.load(t, "r1"); rec.Status != kc.HandedOver; rec, _ = f.load(t, "r1") {
		select {
		case <-w.Updates():
		case <-ctx.Done():
			t.Fatalf("status %s 24 h into the wait, want handed_over", rec.Status)
		}
	}
	f.handedOver(t, "r1", "c", "CAIRN_APPROVAL_TIMEOUT")
}

// A supervisor restarted near the end of the stall timeout of a run whose holder renews but
// makes no progress hands it over at the end (counted from progressed_at), and not before.
func TestStallTimeoutSurvivesARestart(t *testing.T) {
	f := setup(t)
	f.clocked(t, 0)
	sub, err := f.nc.Subscribe(worker.Inbox, func(m *nats.Msg) { _ = m.Respond(nil) }) // the owner is alive
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	f.create(t, "r1", nil)
	h := f.take(t, "r1", "a", worker)
	s := f.supervisor(t)
	f.observeAll(t, s)
	renew := func(s *Supervisor, d time.Duration) {
		t.Helper()
		f.clock.Advance(d)
		if err := h.Renew(f.ctx); err != nil {
			t.Fatalf("renewing: %v", err)
		}
		e, err := f.store.KV().Get(f.ctx, "r1")
		if err != nil {
			t.Fatal(err)
		}
		s.observe(e)
		s.SweepOnce(f.ctx, false)
	}
	for elapsed := time.Duration(0); elapsed < testStall-10*time.Second; elapsed += testLease / 2 {
		renew(s, testLease/2)
	}
	f.status(t, "r1", kc.Running, "before the restart")

	s = f.restarted(t)
	f.status(t, "r1", kc.Running, "restarted 50 s into the stall")
	renew(s, 9*time.Second)
	f.status(t, "r1", kc.Running, "a second before the stall timeout")
	renew(s, time.Second)
	f.handedOver(t, "r1", "a", "no progress for 1m0s")
}

// A supervisor restarted 14 min into a finishing run's 15 min outbox stall hands it over at
// 15 min (counted from progressed_at).
func TestOutboxStallSurvivesARestart(t *testing.T) {
	f := setup(t)
	f.clocked(t, 0)
	f.create(t, "r1", finishing(0))
	f.mark(t, "r1", f.queue(t, "r1", "report", 0), outbox.Sending)
	first := f.supervisor(t)
	f.observeAll(t, first)
	f.clock.Advance(testOutboxStall - time.Minute)
	first.SweepOnce(f.ctx, false)
	f.status(t, "r1", kc.Finishing, "14 min in")

	s := f.restarted(t)
	f.status(t, "r1", kc.Finishing, "restarted 14 min in")
	f.clock.Advance(time.Minute - time.Second)
	s.SweepOnce(f.ctx, false)
	f.status(t, "r1", kc.Finishing, "a second before CAIRN_OUTBOX_STALL")
	f.clock.Advance(time.Second)
	s.SweepOnce(f.ctx, false)
	f.handedOver(t, "r1", "", "CAIRN_OUTBOX_STALL")
}

// Clock skew: a wait the supervisor watched begin is timed by its own clock, whatever the
// writer's says; one it finds already begun is timed by the stored time, but never from
// later than when it first saw it.
func TestTimersAndWriterClockSkew(t *testing.T) {
	t.Run("a writer an hour behind does not end a wait the supervisor saw begin", func(t *testing.T) {
		f := setup(t)
		f.clocked(t, -time.Hour)
		f.create(t, "r1", nil)
		s := f.supervisor(t)
		f.observeAll(t, s)
		f.waitForApproval(t, "r1")
		f.observeAll(t, s)
		f.clock.Advance(24*time.Hour - time.Second) // 24 h since the wait began by the writer's clock
		s.SweepOnce(f.ctx, false)
		f.status(t, "r1", kc.WaitingApproval, "a second before the timeout by the supervisor's clock")
		f.clock.Advance(time.Second)
		s.SweepOnce(f.ctx, false)
		f.handedOver(t, "r1", "c", "CAIRN_APPROVAL_TIMEOUT")
	})
	t.Run("a writer a day ahead does not put off a wait found already begun", func(t *testing.T) {
		f := setup(t)
		f.clocked(t, 24*time.Hour)
		f.waiting(t, "r1")
		s := f.restarted(t)
		f.clock.Advance(24*time.Hour - time.Second)
		s.SweepOnce(f.ctx, false)
		f.status(t, "r1", kc.WaitingApproval, "a second before the timeout from when it was first seen")
		f.clock.Advance(time.Second)
		s.SweepOnce(f.ctx, false)
		f.handedOver(t, "r1", "c", "CAIRN_APPROVAL_TIMEOUT")
	})
}

// waitForApproval has the run wait for approval of c, as the runner's release does.
func (f *fixture) waitForApproval(t *testing.T, runID string) {
	t.Helper()
	if _, _, err := f.store.Mutate(f.ctx, runID, func(r *kc.Record) error {
		for _, name := range []string{"a", "b"} {
			r.Step(name).Status = kc.Verified
		}
		r.Status = kc.WaitingApproval
		r.Approval = &kc.Approval{Step: "c", PlanDigest: "SHA-256=plan"}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// After an outage longer than the stall timeout (a machine down for maintenance), a
// supervisor that finds a run with no lease and old progress does not hand it over at its
// first sweep: it republishes the step's event, as for any run without a holder, and the
// steps get their time to take it again. A run that still makes no progress is handed over
// a stall timeout later.
func TestARunFoundAfterAnOutageIsNotHandedOverAtOnce(t *testing.T) {
	f := setup(t)
	f.clocked(t, 0)
	f.create(t, "r1", nil)
	f.clock.Advance(10 * testStall) // everything was down
	s := f.restarted(t)
	f.status(t, "r1", kc.Running, "at the restart's first sweep")
	f.clock.Advance(testLease)
	f.observeAll(t, s)
	s.SweepOnce(f.ctx, false)
	f.status(t, "r1", kc.Running, "a lease after the restart")
	f.clock.Advance(testStall)
	f.observeAll(t, s)
	s.SweepOnce(f.ctx, false)
	f.handedOver(t, "r1", "a", "no progress for")
}
