package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/eventually"
	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/pipeline"
)

// testLease is the lease duration the test supervisors judge expiry by, on the test clock.
const testLease = 2 * time.Second

// testStall and testReassignLimit are the test supervisors' stall timeout and reassign limit.
const (
	testStall         = time.Minute
	testReassignLimit = 2
)

// abc is the test pipeline: a leased step, a lease-free one, and a leased last step.
var abc = pipeline.Definition{Name: "abc", Input: []string{"warehouse", "date"}, CheckInput: abcInput, RunID: abcRunID,
	Steps: []pipeline.Step{
		{Name: "a", Kind: pipeline.SourceRead, Leased: true},
		{Name: "b", Kind: pipeline.Compute},
		{Name: "c", Kind: pipeline.OutsideMessage, Leased: true},
	}}

// abcInput is the test pipeline's check of a start's input, the night's shape: a warehouse
// and a date, nothing else.
func abcInput(m map[string]json.RawMessage) error {
	for k := range m {
		if k != "warehouse" && k != "date" {
			return fmt.Errorf("unknown field %q", k)
		}
	}
	var in struct{ Warehouse, Date string }
	b, _ := json.Marshal(m)
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	switch {
	case in.Warehouse == "":
		return errors.New("warehouse is required")
	case in.Date == "":
		return errors.New("date is required")
	}
	if _, err := time.Parse(events.DateLayout, in.Date); err != nil {
		return fmt.Errorf("date %q is not a date", in.Date)
	}
	return nil
}

func abcRunID(m map[string]json.RawMessage) string {
	var in struct{ Warehouse, Date string }
	b, _ := json.Marshal(m)
	_ = json.Unmarshal(b, &in)
	return "run-" + in.Date + "-" + in.Warehouse
}

var ldh = kc.StringParams(false, "warehouse", "ldh", "date", "2026-10-13")

// clock is the supervisors' injected clock: it moves only when a test advances it.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// fixture is an embedded nats-server with every Cairn asset, the checkpoint store, and a
// core subscription that sees every step event published (including ones JetStream drops
// as duplicates) in publish order.
type fixture struct {
	ctx     context.Context
	js      jetstream.JetStream
	nc      *nats.Conn
	store   *kc.Store
	marks   jetstream.KeyValue
	notes   jetstream.KeyValue
	natural jetstream.KeyValue
	clock   *clock
	control jetstream.Consumer
	seen    chan *nats.Msg // step events and sentinels, in the order the server sent them
}

const sentinelSubject = "test.sentinel"

func setup(t testing.TB) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	js := natstest.JetStream(t)
	if err := assets.Ensure(ctx, js, assets.Config{Steps: abc.Names()}); err != nil {
		t.Fatalf("creating the assets: %v", err)
	}
	store, err := kc.Open(ctx, js, assets.BucketRuns)
	if err != nil {
		t.Fatalf("opening the store: %v", err)
	}
	marks, err := js.KeyValue(ctx, assets.BucketOutbox)
	if err != nil {
		t.Fatalf("opening the marks: %v", err)
	}
	notes, err := js.KeyValue(ctx, assets.BucketHandovers)
	if err != nil {
		t.Fatalf("opening the handovers: %v", err)
	}
	natural, err := js.KeyValue(ctx, assets.BucketNaturalKeys)
	if err != nil {
		t.Fatalf("opening the natural keys: %v", err)
	}
	control, err := js.Consumer(ctx, assets.StreamRuns, assets.ConsumerControl)
	if err != nil {
		t.Fatalf("looking up the control consumer: %v", err)
	}
	f := &fixture{
		ctx: ctx, js: js, nc: js.Conn(), store: store, marks: marks, notes: notes, natural: natural, control: control,
		clock: &clock{t: time.Date(2026, 10, 13, 22, 0, 0, 0, time.UTC)},
		seen:  make(chan *nats.Msg, 256),
	}
	for _, subj := range []string{"cairn.step.>", sentinelSubject} {
		sub, err := f.nc.ChanSubscribe(subj, f.seen)
		if err != nil {
			t.Fatalf("subscribing to %s: %v", subj, err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := f.nc.Flush(); err != nil {
		t.Fatalf("flushing: %v", err)
	}
	return f
}

// supervisor builds a supervisor on the fixture, with a small lease and the test clock.
func (f *fixture) supervisor(t testing.TB) *Supervisor {
	t.Helper()
	s, err := New(Config{
		JS: f.js, Store: f.store, Marks: f.marks, Handovers: f.notes, NaturalKeys: f.natural, Pipeline: abc,
		Lease: testLease, StallTimeout: testStall, ReassignLimit: testReassignLimit, TakeoverGap: 50 * time.Millisecond, Sweep: 50 * time.Millisecond,
		Now: f.clock.Now,
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// send publishes a plain (non-CloudEvent) command body on subject and returns its stream sequence.
func (f *fixture) send(t *testing.T, subject, body string) uint64 {
	t.Helper()
	ack, err := f.js.Publish(f.ctx, subject, []byte(body))
	if err != nil {
		t.Fatalf("publishing on %s: %v", subject, err)
	}
	return ack.Sequence
}

// fetch takes the next message of the control consumer.
func (f *fixture) fetch(t *testing.T) jetstream.Msg {
	t.Helper()
	batch, err := f.control.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatalf("fetching from control: %v", err)
	}
	for m := range batch.Messages() {
		return m
	}
	t.Fatalf("no message on control: %v", batch.Error())
	return nil
}

// command publishes a command and has s handle it, returning the message's stream sequence.
func (f *fixture) command(t *testing.T, s *Supervisor, subject, body string) uint64 {
	t.Helper()
	seq := f.send(t, subject, body)
	m := f.fetch(t)
	meta, err := m.Metadata()
	if err != nil || meta.Sequence.Stream != seq {
		t.Fatalf("fetched %v (%v), want stream sequence %d", meta, err, seq)
	}
	s.Handle(f.ctx, m)
	return seq
}

// settled reports that the control consumer has nothing delivered and unacknowledged. An ack
// is a plain publish the server applies on its own time, so this waits for it, within a bound.
func (f *fixture) settled(t *testing.T) {
	t.Helper()
	eventually.That(t, 10*time.Second, "control consumer: want every command settled", func() error {
		info, err := f.control.Info(f.ctx)
		if err != nil {
			t.Fatalf("control info: %v", err)
		}
		if info.NumAckPending != 0 || info.NumPending != 0 {
			return fmt.Errorf("%d pending ack, %d pending", info.NumAckPending, info.NumPending)
		}
		return nil
	})
}

func (f *fixture) load(t *testing.T, runID string) (*kc.Record, uint64) {
	t.Helper()
	rec, rev, err := f.store.Load(f.ctx, runID)
	if err != nil {
		t.Fatalf("loading %s: %v", runID, err)
	}
	return rec, rev
}

func (f *fixture) absent(t *testing.T, runID string) {
	t.Helper()
	if _, _, err := f.store.Load(f.ctx, runID); !errors.Is(err, kc.ErrNotFound) {
		t.Fatalf("loading %s: %v, want ErrNotFound", runID, err)
	}
}

// create writes a record as the test needs it (change may be nil) and returns its revision.
func (f *fixture) create(t *testing.T, runID string, change func(r *kc.Record)) uint64 {
	t.Helper()
	rec := kc.New(runID, ldh, abc.Names(), "2026-10-13T22:00:00Z")
	if change != nil {
		change(rec)
	}
	rev, err := f.store.Create(f.ctx, rec)
	if err != nil {
		t.Fatalf("creating %s: %v", runID, err)
	}
	return rev
}

// take has owner take the lease of the run's step, as a worker does.
func (f *fixture) take(t *testing.T, runID, step string, owner kc.Owner) *kc.Holder {
	t.Helper()
	rec, rev := f.load(t, runID)
	h, err := f.store.Take(f.ctx, rec, rev, owner, step, func(r *kc.Record) { r.Step(step).Status = kc.InProgress })
	if err != nil {
		t.Fatalf("taking the lease of %s/%s: %v", runID, step, err)
	}
	return h
}

// observeAll hands s every record of the bucket as its watch would.
func (f *fixture) observeAll(t *testing.T, s *Supervisor) {
	t.Helper()
	lister, err := f.store.KV().ListKeys(f.ctx)
	if err != nil {
		t.Fatalf("listing keys: %v", err)
	}
	for k := range lister.Keys() {
		e, err := f.store.KV().Get(f.ctx, k)
		if err != nil {
			t.Fatalf("getting %s: %v", k, err)
		}
		s.observe(e)
	}
}

// published returns the next step event published (stored or dropped as a duplicate).
func (f *fixture) published(t *testing.T) *nats.Msg {
	t.Helper()
	select {
	case m := <-f.seen:
		if m.Subject == sentinelSubject {
			t.Fatalf("no step event published, want one")
		}
		return m
	case <-time.After(10 * time.Second):
		t.Fatalf("no step event published within 10s")
		return nil
	}
}

// nonePublished checks that no step event was published since the last one read: a
// sentinel published now arrives after anything published before it.
func (f *fixture) nonePublished(t *testing.T) {
	t.Helper()
	if err := f.nc.Publish(sentinelSubject, nil); err != nil {
		t.Fatalf("publishing the sentinel: %v", err)
	}
	select {
	case m := <-f.seen:
		if m.Subject != sentinelSubject {
			t.Fatalf("step event %s %s published, want none", m.Subject, m.Header.Get(jetstream.MsgIDHeader))
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("sentinel did not arrive within 10s")
	}
}

// stepEvent checks that m is the step event of runID's step scheduled by revision rev.
func stepEvent(t *testing.T, m *nats.Msg, runID, step string, rev uint64, generation int) {
	t.Helper()
	if want := events.StepSubject(step, runID); m.Subject != want {
		t.Fatalf("step event on %s, want %s", m.Subject, want)
	}
	if got, want := m.Header.Get(jetstream.MsgIDHeader), events.StepReadyID(runID, step, rev); got != want {
		t.Fatalf("step event Nats-Msg-Id %q, want %q", got, want)
	}
	e, err := events.Decode(m)
	if err != nil {
		t.Fatalf("decoding the step event: %v", err)
	}
	var d events.StepReady
	if err := e.Unmarshal(&d); err != nil {
		t.Fatalf("step event data: %v", err)
	}
	if e.Type != events.TypeStepReady || e.Subject != runID || e.Source != source || d != (events.StepReady{RunID: runID, Step: step, Generation: generation}) {
		t.Fatalf("step event %+v with data %+v", e, d)
	}
}

// stored returns the Msg-Ids of the step events stored on CAIRN_STEPS for the run's step.
func (f *fixture) stored(t *testing.T, runID, step string) []string {
	t.Helper()
	st, err := f.js.Stream(f.ctx, assets.StreamSteps)
	if err != nil {
		t.Fatalf("looking up %s: %v", assets.StreamSteps, err)
	}
	info, err := st.Info(f.ctx)
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	var ids []string
	if info.State.Msgs == 0 {
		return ids
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(f.ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("getting message %d: %v", seq, err)
		}
		if m.Subject == events.StepSubject(step, runID) {
			ids = append(ids, m.Header.Get(jetstream.MsgIDHeader))
		}
	}
	return ids
}

// rejections returns the rejections stored on cairn.rejected.
func (f *fixture) rejections(t *testing.T) []rejected {
	t.Helper()
	evs, err := events.ReadSubject(f.ctx, f.js, assets.StreamRejected, events.RejectedSubject)
	if err != nil {
		t.Fatalf("reading rejections: %v", err)
	}
	out := make([]rejected, 0, len(evs))
	for _, e := range evs {
		var r events.Rejected
		if err := e.Unmarshal(&r); err != nil {
			t.Fatalf("rejection %s: %v", e.ID, err)
		}
		out = append(out, rejected{event: e, data: r})
	}
	return out
}

type rejected struct {
	event events.Event
	data  events.Rejected
}

// auditIDs returns the ids of a run's audit events whose event is name.
func (f *fixture) auditIDs(t *testing.T, runID, name string) []string {
	t.Helper()
	evs, err := events.ReadSubject(f.ctx, f.js, assets.StreamAudit, events.AuditSubject(runID))
	if err != nil {
		t.Fatalf("reading the audit of %s: %v", runID, err)
	}
	var ids []string
	for _, e := range evs {
		var a events.Audit
		if err := e.Unmarshal(&a); err == nil && a.Event == name {
			ids = append(ids, e.ID)
		}
	}
	return ids
}
