package supervisor

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

const startR1 = `{"run_id":"r1","warehouse":"ldh","date":"2026-10-13"}`

func TestStartCreatesTheRecordAndPublishesTheFirstStep(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)

	seq := f.command(t, s, events.RunStartSubject, startR1)

	rec, rev := f.load(t, "r1")
	if rec.Status != kc.Running || !rec.Params.Equal(ldh) || rec.Lease != nil || rec.Generation != 0 {
		t.Fatalf("record status %s params %+v lease %v generation %d, want running %+v no lease generation 0", rec.Status, rec.Params, rec.Lease, rec.Generation, ldh)
	}
	if !slices.Equal(rec.Pipeline, []string{"a", "b", "c"}) {
		t.Fatalf("pipeline %v", rec.Pipeline)
	}
	for _, name := range rec.Pipeline {
		if st := rec.Step(name); st.Status != kc.Pending || st.Attempts != 0 {
			t.Fatalf("step %s is %s with %d attempts, want pending", name, st.Status, st.Attempts)
		}
	}
	if want := []string{fmt.Sprintf("seq-%d", seq)}; !slices.Equal(rec.Requests, want) {
		t.Fatalf("requests %v, want %v", rec.Requests, want)
	}
	if rec.CreatedAt != "2026-10-13T22:00:00Z" {
		t.Fatalf("created_at %q, want the injected clock's time", rec.CreatedAt)
	}
	if rec.Epoch != f.store.Epoch() {
		t.Fatalf("epoch %q, want the bucket's %q", rec.Epoch, f.store.Epoch())
	}

	stepEvent(t, f.published(t), "r1", "a", rev, 0)
	f.nonePublished(t)
	if got, want := f.stored(t, "r1", "a"), []string{events.StepReadyID("r1", "a", rev)}; !slices.Equal(got, want) {
		t.Fatalf("stored step events %v, want %v", got, want)
	}
	if ids := f.auditIDs(t, "r1", "run.started"); !slices.Equal(ids, []string{events.AuditStepID("r1", "run", "started", rev)}) {
		t.Fatalf("run.started audit ids %v", ids)
	}
	f.settled(t)
}

func TestStartTwiceMakesOneRunAndRepublishesOnlyWhileIdle(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)

	f.command(t, s, events.RunStartSubject, startR1)
	_, rev := f.load(t, "r1")
	stepEvent(t, f.published(t), "r1", "a", rev, 0)

	// Again while a is pending with no lease: the event is published again (same revision,
	// so the stream keeps one copy), the record is untouched.
	f.command(t, s, events.RunStartSubject, startR1)
	rec, rev2 := f.load(t, "r1")
	if rev2 != rev || len(rec.Requests) != 1 {
		t.Fatalf("after a second start: revision %d (was %d), requests %v; want the record untouched", rev2, rev, rec.Requests)
	}
	stepEvent(t, f.published(t), "r1", "a", rev, 0)
	f.nonePublished(t)
	if got := f.stored(t, "r1", "a"); len(got) != 1 {
		t.Fatalf("stored step events %v, want one", got)
	}

	// Again while a worker holds a's lease: nothing is published.
	f.take(t, "r1", "a", kc.Owner{Name: "a/host/1", Inbox: "cairn.owner.a.one0000000000000000000"})
	f.command(t, s, events.RunStartSubject, startR1)
	f.nonePublished(t)

	// Again once a is verified and the lease released: nothing is published either.
	_, _, err := f.store.Mutate(f.ctx, "r1", func(r *kc.Record) error {
		r.Lease = nil
		r.Step("a").Status = kc.Verified
		return nil
	})
	if err != nil {
		t.Fatalf("verifying a: %v", err)
	}
	f.command(t, s, events.RunStartSubject, startR1)
	f.nonePublished(t)

	keys := f.keys(t)
	if !slices.Equal(keys, []string{"r1"}) {
		t.Fatalf("bucket keys %v, want one run", keys)
	}
	if rej := f.rejections(t); len(rej) != 0 {
		t.Fatalf("rejections %+v, want none", rej)
	}
	f.settled(t)
}

func TestStartWithOtherParametersIsRejected(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.command(t, s, events.RunStartSubject, startR1)
	before, rev := f.load(t, "r1")
	stepEvent(t, f.published(t), "r1", "a", rev, 0)

	body := `{"run_id":"r1","warehouse":"blr","date":"2026-10-13"}`
	seq := f.command(t, s, events.RunStartSubject, body)

	after, rev2 := f.load(t, "r1")
	if rev2 != rev || !after.Params.Equal(before.Params) || !slices.Equal(after.Requests, before.Requests) {
		t.Fatalf("record changed: revision %d -> %d, params %+v, requests %v", rev, rev2, after.Params, after.Requests)
	}
	f.nonePublished(t)
	rej := f.rejections(t)
	if len(rej) != 1 {
		t.Fatalf("rejections %+v, want one", rej)
	}
	r := rej[0]
	if r.event.ID != events.RejectedID(assets.StreamRuns, seq) || r.event.Subject != "r1" || r.event.Type != events.TypeRejected {
		t.Fatalf("rejection event id %q subject %q type %q", r.event.ID, r.event.Subject, r.event.Type)
	}
	if r.data.Stream != assets.StreamRuns || r.data.Seq != seq || r.data.Subject != events.RunStartSubject || r.data.Data != body {
		t.Fatalf("rejection data %+v", r.data)
	}
	if !strings.Contains(r.data.Reason, "r1") || !strings.Contains(r.data.Reason, "blr") {
		t.Fatalf("rejection reason %q names neither the run nor the refused parameters", r.data.Reason)
	}
	f.settled(t)
}

func TestStartRefusesBadCommands(t *testing.T) {
	cases := []struct {
		name, body, reason, runID string
	}{
		{"malformed JSON", `{"run_id":"r1",`, "not JSON", "none"},
		{"not an object", `[1,2]`, "not a JSON object", "none"},
		{"missing warehouse", `{"run_id":"r1","date":"2026-10-13"}`, "warehouse is required", "r1"},
		{"missing date", `{"run_id":"r1","warehouse":"ldh"}`, "date is required", "r1"},
		{"bad date", `{"run_id":"r1","warehouse":"ldh","date":"13/10/2026"}`, "is not a date", "r1"},
		{"bad run id", `{"run_id":"r.1","warehouse":"ldh","date":"2026-10-13"}`, "run_id", "none"},
		{"unknown field", `{"run_id":"r1","warehouse":"ldh","date":"2026-10-13","wharehouse":"x"}`, "wharehouse", "r1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := setup(t)
			s := f.supervisor(t)
			seq := f.command(t, s, events.RunStartSubject, c.body)

			if keys := f.keys(t); len(keys) != 0 {
				t.Fatalf("bucket keys %v, want no record", keys)
			}
			f.nonePublished(t)
			rej := f.rejections(t)
			if len(rej) != 1 {
				t.Fatalf("rejections %+v, want one", rej)
			}
			r := rej[0]
			if r.data.Seq != seq || r.data.Data != c.body || !strings.Contains(r.data.Reason, c.reason) {
				t.Fatalf("rejection %+v, want seq %d and a reason with %q", r.data, seq, c.reason)
			}
			if r.event.Subject != c.runID {
				t.Fatalf("rejection names run %q, want %q", r.event.Subject, c.runID)
			}
			f.settled(t)
		})
	}
}

func TestStartWithoutRunIDNamesTheRunByDateAndWarehouse(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.command(t, s, events.RunStartSubject, `{"warehouse":"ldh","date":"2026-10-13","request_id":"req-7"}`)

	const runID = "run-2026-10-13-ldh"
	rec, rev := f.load(t, runID)
	if rec.RunID != runID || rec.Status != kc.Running || !slices.Equal(rec.Requests, []string{"req-7"}) {
		t.Fatalf("record %s status %s requests %v", rec.RunID, rec.Status, rec.Requests)
	}
	stepEvent(t, f.published(t), runID, "a", rev, 0)
	if keys := f.keys(t); !slices.Equal(keys, []string{runID}) {
		t.Fatalf("bucket keys %v", keys)
	}
}

func TestApproveOfARunWaitingForNothingIsAudited(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.command(t, s, events.RunStartSubject, startR1)
	_, rev := f.load(t, "r1")
	f.published(t)

	f.command(t, s, events.RunSubject("r1", events.VerbApprove), ``)
	if _, rev2 := f.load(t, "r1"); rev2 != rev {
		t.Fatalf("approve wrote revision %d", rev2)
	}
	if ids := f.auditIDs(t, "r1", "approve.ignored"); len(ids) != 1 {
		t.Fatalf("approve.ignored audit events %v", ids)
	}
	f.nonePublished(t)
	f.settled(t)
}

// keys lists the bucket's keys.
func (f *fixture) keys(t *testing.T) []string {
	t.Helper()
	lister, err := f.store.KV().ListKeys(f.ctx)
	if err != nil {
		t.Fatalf("listing keys: %v", err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// A start repeated after the first event was consumed (the step still pending, no lease) must
// not be swallowed by deduplication: it records itself and publishes under its own revision.
func TestStartAgainAfterTheEventWasConsumed(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.command(t, s, events.RunStartSubject, startR1)
	_, rev := f.load(t, "r1")
	stepEvent(t, f.published(t), "r1", "a", rev, 0)
	cons, err := f.js.Consumer(f.ctx, assets.StreamSteps, "a")
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.DoubleAck(f.ctx); err != nil {
		t.Fatal(err)
	}
	f.command(t, s, events.RunStartSubject, startR1)
	_, rev2 := f.load(t, "r1")
	if rev2 == rev {
		t.Fatal("the repeated start wrote nothing: its publish was swallowed by deduplication")
	}
	if got, want := f.stored(t, "r1", "a"), []string{events.StepReadyID("r1", "a", rev2)}; !slices.Equal(got, want) {
		t.Fatalf("stored step events %v, want %v", got, want)
	}
}
