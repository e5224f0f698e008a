package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cairnhq/cairn/internal/eventually"
	"github.com/cairnhq/cairn/internal/handover"
	"github.com/cairnhq/cairn/internal/stepevent"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
)

// handedOver checks that the run is handed over at step with a note whose error contains why,
// its lease released, and one handover audit event.
func (f *fixture) handedOver(t *testing.T, runID, step, why string) *kc.Record {
	t.Helper()
	rec, _ := f.load(t, runID)
	if rec.Status != kc.HandedOver || rec.Lease != nil || rec.Handover == nil {
		t.Fatalf("status %s, lease %+v, handover %v; want handed_over, no lease, a note", rec.Status, rec.Lease, rec.Handover)
	}
	if step != "" {
		if st := rec.Step(step); st.Status != kc.Failed || st.LastError == nil || !strings.Contains(*st.LastError, why) {
			t.Fatalf("step %s: %s, last_error %v; want failed with %q", step, st.Status, st.LastError, why)
		}
	}
	e, err := f.notes.Get(f.ctx, runID)
	if err != nil {
		t.Fatalf("handover note: %v", err)
	}
	var n runner.HandoverNote
	if err := json.Unmarshal(e.Value(), &n); err != nil {
		t.Fatalf("handover note: %v", err)
	}
	if n.ID != *rec.Handover || n.RunID != runID || n.Step != step || !strings.Contains(n.Error, why) || !strings.Contains(n.NextAction, "cairn resume "+runID) {
		t.Fatalf("note %+v (record says %s)", n, *rec.Handover)
	}
	// The audit event follows the record's write: a watcher may see the record first.
	eventually.That(t, 20*time.Second, "a handover audit event of "+runID, eventually.True(func() bool { return len(f.auditIDs(t, runID, "handover")) > 0 }))
	if ids := f.auditIDs(t, runID, "handover"); len(ids) != 1 {
		t.Fatalf("handover audit events %v, want one", ids)
	}
	return rec
}

func TestSweepHandsOverARunWithNoProgressForTheStallTimeout(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.create(t, "r1", nil)
	h := f.take(t, "r1", "a", worker)
	f.observeAll(t, s)

	// The holder keeps renewing (so the lease never expires) but does nothing else.
	for elapsed := time.Duration(0); elapsed < testStall; elapsed += testLease / 2 {
		f.clock.Advance(testLease / 2)
		if err := h.Renew(f.ctx); err != nil {
			t.Fatalf("renewing: %v", err)
		}
		e, err := f.store.KV().Get(f.ctx, "r1")
		if err != nil {
			t.Fatal(err)
		}
		s.observe(e)
		s.SweepOnce(f.ctx, false)
		if rec, _ := f.load(t, "r1"); elapsed+testLease/2 < testStall && rec.Status != kc.Running {
			t.Fatalf("handed over after %s, before the stall timeout", elapsed+testLease/2)
		}
	}
	f.handedOver(t, "r1", "a", "no progress for")
	if got := counter(t, s.cfg.Metrics.Handovers.WithLabelValues("a", reasonStall)); got != 1 {
		t.Fatalf("cairn_handovers_total{reason=stall} = %v", got)
	}
	// The stalled holder's next write is refused: the record is no longer its own.
	if err := h.Renew(f.ctx); !errors.Is(err, kc.ErrFenced) {
		t.Fatalf("renewing after the handover: %v, want ErrFenced", err)
	}
}

func TestSweepCountsProgressAsProgress(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.create(t, "r1", nil)
	f.observeAll(t, s)
	f.clock.Advance(testStall - time.Second)
	// A step commits: the record changes, so the stall clock starts again.
	if _, _, err := f.store.Mutate(f.ctx, "r1", func(r *kc.Record) error { r.NextAction = "moved on"; return nil }); err != nil {
		t.Fatal(err)
	}
	f.observeAll(t, s)
	f.clock.Advance(2 * time.Second)
	s.SweepOnce(f.ctx, false)
	if rec, _ := f.load(t, "r1"); rec.Status != kc.Running {
		t.Fatalf("status %s after progress, want running", rec.Status)
	}
}

func TestSweepHandsOverARunReassignedMoreThanTheLimit(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.create(t, "r1", nil)
	for i := range testReassignLimit {
		f.take(t, "r1", "a", worker)
		_, taken := f.load(t, "r1")
		f.observeAll(t, s)
		s.SweepOnce(f.ctx, false)
		f.clock.Advance(testLease)
		s.SweepOnce(f.ctx, false)
		if rec, rev := f.load(t, "r1"); rec.Lease != nil || rev <= taken {
			t.Fatalf("reassignment %d: lease %+v", i+1, rec.Lease)
		}
		<-f.seen // the step event published again
	}
	f.take(t, "r1", "a", worker)
	f.observeAll(t, s)
	s.SweepOnce(f.ctx, false)
	f.clock.Advance(testLease)
	s.SweepOnce(f.ctx, false)
	f.handedOver(t, "r1", "a", "CAIRN_REASSIGN_LIMIT")
	f.nonePublished(t)
	if got := counter(t, s.cfg.Metrics.Reassignments.WithLabelValues("a", "expired")); got != testReassignLimit {
		t.Fatalf("cairn_reassignments_total = %v, want %d", got, testReassignLimit)
	}
}

func TestMaxDeliveriesAdvisoryHandsTheRunOver(t *testing.T) {
	f := setup(t)
	// Step b's consumer gives up after two deliveries.
	st, err := f.js.Stream(f.ctx, assets.StreamSteps)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := st.Consumer(f.ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	cfg := cons.CachedInfo().Config
	cfg.MaxDeliver = 2
	if cons, err = st.UpdateConsumer(f.ctx, cfg); err != nil {
		t.Fatal(err)
	}
	s := f.supervisor(t)
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-s.Ready():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}

	rev := f.create(t, "r1", func(r *kc.Record) { r.Step("a").Status = kc.Verified })
	if err := stepevent.Publish(f.ctx, f.js, assets.Default, "/test", "r1", "b", 0, rev, f.clock.Now()); err != nil {
		t.Fatal(err)
	}
	// A worker that dies on the event every time: delivered, never answered. The server
	// announces the limit when a third pull finds the event spent.
	for i := range 3 {
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			_ = m.Nak()
		}
		if want := min(1, 2-i); n != want {
			t.Fatalf("pull %d: %d messages, want %d", i+1, n, want)
		}
	}
	eventually.That(t, 20*time.Second, "r1 handed over", func() error {
		if rec, _ := f.load(t, "r1"); rec.Status != kc.HandedOver {
			return fmt.Errorf("status %s", rec.Status)
		}
		return nil
	})
	f.handedOver(t, "r1", "b", "max deliver")
	if ids := f.stored(t, "r1", "b"); len(ids) != 0 {
		t.Fatalf("the dead step event is still stored: %v", ids)
	}
}

// counter reads a counter's value.
func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// A step that made progress since its last reassignments (the runner's step.progressed) is
// not looping: the reassignment count starts again from it. The note of the handover that
// comes at last says what the record knows: the verified step's keys and the loop guard's
// last count of the stopped one.
func TestReassignmentsCountFromTheStepsLastProgress(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.create(t, "r1", func(r *kc.Record) {
		r.Step("a").Status = kc.Verified
		r.Step("a").Effects = &kc.Effects{Keys: 7}
		r.Progress = &kc.Progress{Step: "b", Count: 12, NoProgress: 1}
	})
	reassign := func(i int) {
		f.take(t, "r1", "b", worker)
		_, taken := f.load(t, "r1")
		f.observeAll(t, s)
		s.SweepOnce(f.ctx, false)
		f.clock.Advance(testLease)
		s.SweepOnce(f.ctx, false)
		if rec, rev := f.load(t, "r1"); rec.Status != kc.Running || rec.Lease != nil || rev <= taken {
			t.Fatalf("reassignment %d: status %s, lease %+v", i, rec.Status, rec.Lease)
		}
		<-f.seen
	}
	for i := range testReassignLimit {
		reassign(i + 1)
	}
	e, err := events.New("r1:b:step.progressed:99", events.TypeAudit, "/cairn/b", "r1", f.clock.Now(), events.Audit{RunID: "r1", Step: "b", Event: "step.progressed", Detail: "13"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := events.Encode(events.AuditSubject("r1"), e)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.js.PublishMsg(f.ctx, m); err != nil {
		t.Fatal(err)
	}
	for i := range testReassignLimit {
		reassign(testReassignLimit + i + 1)
	}
	f.take(t, "r1", "b", worker)
	f.observeAll(t, s)
	s.SweepOnce(f.ctx, false)
	f.clock.Advance(testLease)
	s.SweepOnce(f.ctx, false)
	f.handedOver(t, "r1", "b", "CAIRN_REASSIGN_LIMIT")
	ne, err := f.notes.Get(f.ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	var n runner.HandoverNote
	if err := json.Unmarshal(ne.Value(), &n); err != nil {
		t.Fatal(err)
	}
	want := handover.Done{Keys: 7, Steps: []handover.StepDone{{Step: "a", Keys: 7}, {Step: "b", Counted: 12}}}
	if fmt.Sprint(n.Done) != fmt.Sprint(want) {
		t.Errorf("note done %+v, want %+v", n.Done, want)
	}
}
