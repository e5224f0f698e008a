package runner_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/eventually"
	"github.com/cairnhq/cairn/internal/stepevent"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
)

func finishing(r *kc.Record) bool { return r.Status == kc.Finishing }

func handedOver(r *kc.Record) bool { return r.Status == kc.HandedOver }

// runAll starts a runner for every toy step; one's implementation is given.
func (f *fixture) runAll(t *testing.T, one runner.Step) *runner.Runner {
	t.Helper()
	r := f.run(t, f.config("one", one))
	f.run(t, f.config("two", output("two")))
	f.run(t, f.config("three", output("three")))
	return r
}

func TestRunsEveryStepInOrder(t *testing.T) {
	f := setup(t)
	f.runAll(t, output("one"))
	f.start(t, "r1")
	rec := f.wait(t, "r1", finishing)
	for _, s := range toy.Names() {
		st := rec.Step(s)
		if st.Status != kc.Verified || st.Output == nil || st.Token == nil || st.Versions.Code == nil {
			t.Fatalf("step %s: %+v", s, st)
		}
		b, err := f.artifacts.Load(context.Background(), st.Output)
		if err != nil || string(b) != `{"step":"`+s+`"}` {
			t.Errorf("output of %s: %s (%v)", s, b, err)
		}
	}
	if rec.Lease != nil || rec.Restarts != 0 {
		t.Errorf("lease %+v, restarts %d", rec.Lease, rec.Restarts)
	}
	// The last step's step.verified is published just after its commit; its ack is not waited for.
	var as []events.Audit
	eventually.That(t, 20*time.Second, "three's step.verified audited", eventually.True(func() bool { as = f.audit(t, "r1"); return count(as, "step.verified", "three") == 1 }))
	// The lease-free step two's commit is its record alone (cairn timeline reads it there).
	for _, s := range toy.Names() {
		if want := auditedCommits(s); count(as, "step.verified", s) != want {
			t.Errorf("step %s verified %d times in the audit, want %d", s, count(as, "step.verified", s), want)
		}
	}
	if count(as, "step.started", "two") != 0 {
		t.Error("the lease-free step two recorded a lease take")
	}
}

func TestTemporaryErrorRetriesTheStep(t *testing.T) {
	f := setup(t)
	var calls atomic.Int32
	f.runAll(t, stepFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
		if calls.Add(1) == 1 {
			return nil, runner.Temporary(errBoom)
		}
		return output("one")(ctx, a)
	}))
	f.start(t, "r1")
	rec := f.wait(t, "r1", finishing)
	if got := rec.Step("one"); got.Attempts != 1 || got.LastError == nil || !strings.Contains(*got.LastError, "boom") {
		t.Errorf("step one: attempts %d, last error %v; want 1 and boom", got.Attempts, got.LastError)
	}
	if calls.Load() != 2 {
		t.Errorf("step one ran %d times, want 2", calls.Load())
	}
	if n := count(f.audit(t, "r1"), "step.failed", "one"); n != 1 {
		t.Errorf("%d step.failed events, want 1", n)
	}
}

// note reads the run's handover note.
func (f *fixture) note(t *testing.T, runID string) runner.HandoverNote {
	t.Helper()
	e, err := f.handovers.Get(context.Background(), runID)
	if err != nil {
		t.Fatalf("handover note of %s: %v", runID, err)
	}
	var n runner.HandoverNote
	if err := json.Unmarshal(e.Value(), &n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestHandover(t *testing.T) {
	for name, tc := range map[string]struct {
		step runner.Step
		want string
	}{
		"unknown error": {stepFunc(func(context.Context, *runner.Attempt) (*runner.Result, error) { return nil, errBoom }), "boom"},
		"loop guard": {stepFunc(func(context.Context, *runner.Attempt) (*runner.Result, error) {
			return nil, runner.Temporary(errBoom)
		}), "loop guard"},
		"park limit": {stepFunc(func(context.Context, *runner.Attempt) (*runner.Result, error) {
			return &runner.Result{Items: 10, Parked: []kc.Parked{{Item: "a", Reason: "x"}, {Item: "b", Reason: "y"}}}, nil
		}), "park limit"},
	} {
		t.Run(name, func(t *testing.T) {
			f := setup(t)
			f.runAll(t, tc.step)
			f.start(t, "r1")
			rec := f.wait(t, "r1", handedOver)
			n := f.note(t, "r1")
			if rec.Step("one").Status != kc.Failed || rec.Lease != nil || rec.Handover == nil || *rec.Handover != n.ID {
				t.Errorf("record: step %s, lease %+v, handover %v; note %s", rec.Step("one").Status, rec.Lease, rec.Handover, n.ID)
			}
			if n.Step != "one" || !strings.Contains(n.Error, tc.want) || n.NextAction == "" {
				t.Errorf("note %+v, want step one and an error naming %q", n, tc.want)
			}
			if rec.Step("two").Status != kc.Pending {
				t.Errorf("step two %s after a handover, want pending", rec.Step("two").Status)
			}
		})
	}
}

// A worker whose lease is taken while it works stops at once, counts itself fenced, writes
// nothing more and publishes no step event.
func TestZombieIsFenced(t *testing.T) {
	f := setup(t)
	started := make(chan struct{})
	r := f.run(t, f.config("one", stepFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	})))
	f.start(t, "r1")
	<-started
	ctx := context.Background()
	thief := kc.Owner{Name: "one/other-host/1", Inbox: "cairn.owner.one.thief00000000000000000"}
	_, _, err := f.store.Mutate(ctx, "r1", func(n *kc.Record) error { n.Lease = nil; return nil })
	if err != nil {
		t.Fatal(err)
	}
	rec, rev, err := f.store.Load(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Take(ctx, rec, rev, thief, "one", nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for count(f.audit(t, "r1"), "fenced", "one") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the zombie never recorded itself fenced")
		}
		waitForAudit(t, f, "r1")
	}
	if r.FencedTotal() != 1 {
		t.Errorf("fenced total %d, want 1", r.FencedTotal())
	}
	got, _, err := f.store.Load(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Lease == nil || got.Lease.Owner != thief.Name || got.Step("one").Status != kc.InProgress {
		t.Errorf("the zombie wrote after it was fenced: lease %+v, step %s", got.Lease, got.Step("one").Status)
	}
	if stored, err := stepevent.Stored(ctx, f.js, assets.Default, "r1", "two"); err != nil || stored {
		t.Errorf("a step event for two was published (%v, %v)", stored, err)
	}
}

// waitForAudit blocks until a new audit event of the run is stored (or a second passes).
func waitForAudit(t *testing.T, f *fixture, runID string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c, err := f.js.OrderedConsumer(ctx, assets.StreamAudit, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.AuditSubject(runID)}, DeliverPolicy: jetstream.DeliverNewPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Next(jetstream.FetchContext(ctx))
}

// The event of a step whose owner is gone (no responders on its inbox) is taken over at once:
// the lease is released, the event published again, and the step restarts.
func TestFastTakeoverOfADeadOwner(t *testing.T) {
	f := setup(t)
	var calls atomic.Int32
	f.runAll(t, stepFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
		calls.Add(1)
		if !a.Restart {
			t.Error("the attempt after a dead owner is not flagged as a restart")
		}
		return output("one")(ctx, a)
	}))
	ctx := context.Background()
	rev, err := f.store.Create(ctx, kc.New("r1", kc.StringParams(false, "warehouse", "w", "date", "2026-10-13"), toy.Names(), "2026-10-13T22:00:00Z"))
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err := f.store.Load(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	dead := kc.Owner{Name: "one/dead-host/1", Inbox: "cairn.owner.one.nobodylistens000000000"}
	if _, err := f.store.Take(ctx, rec, rev, dead, "one", func(n *kc.Record) { n.Step("one").Status = kc.InProgress }); err != nil {
		t.Fatal(err)
	}
	if err := stepevent.Publish(ctx, f.js, assets.Default, "/cairn/test", "r1", "one", 0, rev, time.Now()); err != nil {
		t.Fatal(err)
	}
	got := f.wait(t, "r1", finishing)
	if got.Restarts != 1 || got.Step("one").Attempts != 1 || calls.Load() != 1 {
		t.Errorf("restarts %d, attempts %d, calls %d; want 1 each", got.Restarts, got.Step("one").Attempts, calls.Load())
	}
	if n := count(f.audit(t, "r1"), "reassigned", "one"); n != 1 {
		t.Errorf("%d reassigned events, want 1", n)
	}
}

// A repeated event of a verified step does not run it again.
func TestVerifiedStepIsNotRunAgain(t *testing.T) {
	f := setup(t)
	var calls atomic.Int32
	f.runAll(t, stepFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
		calls.Add(1)
		return output("one")(ctx, a)
	}))
	f.start(t, "r1")
	rec := f.wait(t, "r1", finishing)
	ctx := context.Background()
	if err := stepevent.Publish(ctx, f.js, assets.Default, "/cairn/test", "r1", "one", 0, 999999, time.Now()); err != nil {
		t.Fatal(err)
	}
	stream, err := f.js.Stream(ctx, assets.StreamSteps)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the repeated event was never settled")
		}
		waitForAudit(t, f, "r1")
	}
	if calls.Load() != 1 {
		t.Errorf("step one ran %d times, want 1", calls.Load())
	}
	after, _, err := f.store.Load(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if *after.Step("one").Token != *rec.Step("one").Token {
		t.Error("the verified step was committed again")
	}
}

// An event that does not decode is recorded on cairn.rejected with its reason and terminated.
func TestInvalidEventRejected(t *testing.T) {
	f := setup(t)
	f.run(t, f.config("one", output("one")))
	ctx := context.Background()
	if _, err := f.js.Publish(ctx, events.StepSubject("one", "r1"), []byte("not a cloudevent")); err != nil {
		t.Fatal(err)
	}
	c, err := f.js.OrderedConsumer(ctx, assets.StreamRejected, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Next(jetstream.FetchMaxWait(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	e, err := events.Decode(&nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()})
	if err != nil {
		t.Fatal(err)
	}
	var r events.Rejected
	if err := e.Unmarshal(&r); err != nil {
		t.Fatal(err)
	}
	if r.Stream != assets.StreamSteps || r.Subject != events.StepSubject("one", "r1") || !strings.Contains(r.Reason, "ce-specversion") && !strings.Contains(r.Reason, "invalid") {
		t.Errorf("rejection %+v", r)
	}
	if r.Data != "not a cloudevent" {
		t.Errorf("the rejection keeps %q, want the refused body", r.Data)
	}
}
