package supervisor

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// other is a second supervisor on its own connection, as another replica of the service.
func (f *fixture) other(t *testing.T) *Supervisor {
	t.Helper()
	nc, err := nats.Connect(f.nc.ConnectedUrl())
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	store, err := kc.Open(f.ctx, js, assets.BucketRuns)
	if err != nil {
		t.Fatalf("opening the store: %v", err)
	}
	marks, err := js.KeyValue(f.ctx, assets.BucketOutbox)
	if err != nil {
		t.Fatalf("opening the marks: %v", err)
	}
	notes, err := js.KeyValue(f.ctx, assets.BucketHandovers)
	if err != nil {
		t.Fatalf("opening the handovers: %v", err)
	}
	natural, err := js.KeyValue(f.ctx, assets.BucketNaturalKeys)
	if err != nil {
		t.Fatalf("opening the natural keys: %v", err)
	}
	s, err := New(Config{JS: js, Store: store, Marks: marks, Handovers: notes, NaturalKeys: natural, Pipeline: abc, Lease: testLease, StallTimeout: testStall, ReassignLimit: testReassignLimit, TakeoverGap: 50 * time.Millisecond, Now: f.clock.Now})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// concurrently has each supervisor handle its message at the same time.
func concurrently(ctx context.Context, sups []*Supervisor, msgs []jetstream.Msg) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, s := range sups {
		wg.Go(func() {
			<-start
			s.Handle(ctx, msgs[i])
		})
	}
	close(start)
	wg.Wait()
}

// oneRun checks that the bucket holds r1 only, started once, with one stored step event.
func (f *fixture) oneRun(t *testing.T, request string) {
	t.Helper()
	if keys := f.keys(t); !slices.Equal(keys, []string{"r1"}) {
		t.Fatalf("bucket keys %v, want r1 only", keys)
	}
	rec, rev := f.load(t, "r1")
	if !slices.Equal(rec.Requests, []string{request}) || rec.Status != kc.Running {
		t.Fatalf("requests %v status %s", rec.Requests, rec.Status)
	}
	want := events.StepReadyID("r1", "a", rev)
	if got := f.stored(t, "r1", "a"); !slices.Equal(got, []string{want}) {
		t.Fatalf("stored step events %v, want [%s]", got, want)
	}
	for range 2 { // the winner's publish and the loser's (dropped as a duplicate)
		stepEvent(t, f.published(t), "r1", "a", rev, 0)
	}
	f.nonePublished(t)
	if ids := f.auditIDs(t, "r1", "run.started"); len(ids) != 1 {
		t.Fatalf("run.started audit ids %v, want one", ids)
	}
	if rej := f.rejections(t); len(rej) != 0 {
		t.Fatalf("rejections %+v, want none", rej)
	}
}

func TestTwoSupervisorsHandlingTheSameStartMakeOneRun(t *testing.T) {
	f := setup(t)
	s1, s2 := f.supervisor(t), f.other(t)
	seq := f.send(t, events.RunStartSubject, startR1)
	m := f.fetch(t)

	concurrently(f.ctx, []*Supervisor{s1, s2}, []jetstream.Msg{m, m})

	f.oneRun(t, fmt.Sprintf("seq-%d", seq))
	f.settled(t)
}

func TestTwoSupervisorsHandlingTwoCopiesOfAStartMakeOneRun(t *testing.T) {
	f := setup(t)
	s1, s2 := f.supervisor(t), f.other(t)
	body := `{"request_id":"req-1","run_id":"r1","warehouse":"ldh","date":"2026-10-13"}`
	f.send(t, events.RunStartSubject, body)
	f.send(t, events.RunStartSubject, body)
	m1, m2 := f.fetch(t), f.fetch(t)

	concurrently(f.ctx, []*Supervisor{s1, s2}, []jetstream.Msg{m1, m2})

	f.oneRun(t, "req-1")
	f.settled(t)
}

func TestRunFreesGoneOwnersServesCommandsAndExpiresLeases(t *testing.T) {
	f := setup(t)
	f.create(t, "old", func(r *kc.Record) { r.Params = kc.StringParams(false, "warehouse", "ldh", "date", "2026-10-12") }) // another night than r1's
	f.take(t, "old", "a", kc.Owner{Name: "a/host/0", Inbox: "cairn.owner.a.gone000000000000000000"})
	_, taken := f.load(t, "old")
	s := f.supervisor(t)

	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- s.Run(ctx) }()

	// At startup, the lease of an owner with no responders is released at once.
	m := f.published(t)
	rec, rev := f.load(t, "old")
	if rec.Lease != nil || rev <= taken {
		t.Fatalf("old: lease %+v at revision %d, want released", rec.Lease, rev)
	}
	stepEvent(t, m, "old", "a", rev, 0)

	// Commands are consumed.
	f.send(t, events.RunStartSubject, startR1)
	m = f.published(t)
	_, rev = f.load(t, "r1")
	stepEvent(t, m, "r1", "a", rev, 0)

	// A lease nobody renews expires by the injected clock; the watch feeds the sweeps.
	w, err := f.store.KV().Watch(f.ctx, "r1", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatalf("watching r1: %v", err)
	}
	defer func() { _ = w.Stop() }()
	f.take(t, "r1", "a", worker)
	deadline := time.After(20 * time.Second)
	for released := false; !released; {
		f.clock.Advance(testLease / 4)
		select {
		case e := <-w.Updates():
			if e == nil {
				continue
			}
			r, err := kc.Decode(e.Value())
			if err != nil {
				t.Fatalf("decoding r1: %v", err)
			}
			if r.Lease == nil && r.Step("a").Status == kc.InProgress {
				released = true
				stepEvent(t, f.published(t), "r1", "a", e.Revision(), 0)
			}
		case <-time.After(50 * time.Millisecond): // one sweep period: advance the clock again
		case <-deadline:
			t.Fatal("the expired lease of r1 was not released within 20s")
		}
	}

	select {
	case err := <-stopped:
		t.Fatalf("Run returned before its context ended: %v", err)
	default:
	}
	cancel()
	stopCleanly(t, stopped)
}

// knownStopRace is what Run returns when its context ends while it is busy: the watch made
// with that context closes its channel too, and Run's select may take that branch first
// (supervisor.go, the "!ok" case of w.Updates()). TestRunReturnsNilOnACleanStop pins the fix.
const knownStopRace = "the watch on the checkpoints ended"

// stopCleanly waits for Run to return after its context ended.
func stopCleanly(t *testing.T, stopped <-chan error) {
	t.Helper()
	select {
	case err := <-stopped:
		switch {
		case err == nil:
		case err.Error() == knownStopRace:
			t.Logf("known bug: Run returned %q on a clean stop, want nil", err)
		default:
			t.Fatalf("Run: %v, want nil on a clean stop", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of its context ending")
	}
}

func TestNewChecksItsConfiguration(t *testing.T) {
	f := setup(t)
	if _, err := New(Config{JS: f.js, Store: f.store, Pipeline: abc}); err == nil {
		t.Fatal("New without the outbox marks: nil error")
	}
	if _, err := New(Config{JS: f.js, Store: f.store, Marks: f.marks, Pipeline: abc}); err == nil {
		t.Fatal("New without the handover bucket: nil error")
	}
	if _, err := New(Config{JS: f.js, Store: f.store, Marks: f.marks, Handovers: f.notes, Pipeline: abc}); err == nil {
		t.Fatal("New without the natural keys: nil error")
	}
	if _, err := New(Config{JS: f.js, Store: f.store, Marks: f.marks, Handovers: f.notes, NaturalKeys: f.natural}); err == nil {
		t.Fatal("New with an empty pipeline: nil error")
	}
	s, err := New(Config{JS: f.js, Store: f.store, Marks: f.marks, Handovers: f.notes, NaturalKeys: f.natural, Pipeline: abc})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if s.cfg.Lease != 15*time.Second || s.cfg.TakeoverGap != 500*time.Millisecond || s.cfg.Sweep != time.Second || s.cfg.Now == nil ||
		s.cfg.StallTimeout != 10*time.Minute || s.cfg.ReassignLimit != 5 {
		t.Fatalf("defaults %+v", s.cfg)
	}
}

func TestRunReturnsNilOnACleanStop(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	ctx, cancel := context.WithCancel(f.ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- s.Run(ctx) }()
	f.send(t, events.RunStartSubject, startR1)
	f.published(t) // Run is past its startup and consuming
	cancel()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Run: %v, want nil on a clean stop", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of its context ending")
	}
}
