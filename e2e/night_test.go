package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	job "github.com/cairnhq/cairn/internal/night"
	"github.com/cairnhq/cairn/internal/recon"
	"github.com/cairnhq/cairn/pkg/artifacts"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

const runLimit = 3 * time.Minute

// report reads the summary the report step sent.
func (n *night) report(rec *kc.Record) recon.Report {
	n.t.Helper()
	store, err := artifacts.Open(context.Background(), n.js, assets.ObjectArtifacts)
	if err != nil {
		n.t.Fatal(err)
	}
	b, err := store.Load(context.Background(), rec.Step("report").Output)
	if err != nil {
		n.t.Fatal(err)
	}
	var out struct {
		Report recon.Report `json:"report"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		n.t.Fatal(err)
	}
	return out.Report
}

func (n *night) assertReport(rec *kc.Record) {
	n.t.Helper()
	r := n.report(rec)
	want := n.truth.Report
	if r.Invoices != want.Invoices || r.Lines != want.Lines || r.Adjustments != want.Adjustments || r.TotalPaise != want.TotalPaise {
		n.t.Errorf("report %+v, want %+v", r, want)
	}
	if len(r.Parked) != len(n.truth.Parked) {
		n.t.Errorf("report parks %d invoices, want %d", len(r.Parked), len(n.truth.Parked))
	}
}

// assertNight checks a finished night against the ground truth: the books, the mail, the
// report, no extractor call or document load repeated, and the restarts counted.
func (n *night) assertNight(rec *kc.Record, restarts int) {
	n.t.Helper()
	n.assertTruth()
	n.assertReport(rec)
	c := n.audit()
	if c["extractor.called"] != 312 || c["document.read"] != 312 {
		n.t.Errorf("extractor calls %d, document reads %d, want 312 each (none repeated)", c["extractor.called"], c["document.read"])
	}
	if rec.Restarts != restarts {
		n.t.Errorf("restarts %d, want %d", rec.Restarts, restarts)
	}
}

func TestNightUninterrupted(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newNight(t, 0)
	n.raceChild()
	n.start(anyPort)
	addr := n.metricsAddr()
	n.startRun()
	n.startRun() // the same start twice makes one run
	rec := n.waitStatus(runLimit, kc.Done)
	n.assertNight(rec, 0)
	// cairn dev's /metrics shows the night: every step verified, the mail sent.
	for _, step := range rec.Pipeline {
		key := fmt.Sprintf(`cairn_steps_verified_total{step=%q}`, step)
		if !poll(30*time.Second, func() bool { m, err := scrape(addr); return err == nil && metricValue(m, key) == 1 }) {
			m, err := scrape(addr)
			t.Errorf("%s: %v (%v), want 1", key, metricValue(m, key), err)
		}
	}
	m, err := scrape(addr)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := metricValue(m, `cairn_outbox_messages_total{outcome="sent"}`), float64(len(n.truth.DebitNotes)+1); got != want {
		t.Errorf("outbox messages sent %v, want %v", got, want)
	}
	if got := sumByName(m, "cairn_fenced_total") + sumByName(m, "cairn_handovers_total"); got != 0 {
		t.Errorf("fenced + handovers = %v on an uninterrupted night", got)
	}
	keys, err := n.js.KeyValue(context.Background(), assets.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	l, err := keys.Keys(context.Background())
	if err != nil || len(l) != 1 {
		t.Errorf("runs %v (%v), want exactly one", l, err)
	}
}

// The crash that started it: the process dies at entry 24 of post-ledger and starts again.
func TestCrashAtLedgerEntry24(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newNight(t, 0)
	n.raceChild()
	fault := "post-ledger.before-write.24=exit@once"
	n.crash(fault)
	var rows int
	if err := n.db("ledger.db").QueryRow(`SELECT count(*) FROM ledger_entries`).Scan(&rows); err != nil || rows != 23 {
		t.Fatalf("after the crash the ledger holds %d rows (%v), want 23", rows, err)
	}
	n.start("CAIRN_FAULTS=" + fault)
	rec := n.waitStatus(runLimit, kc.Done)
	n.assertNight(rec, 1)
}

// A crash in the middle of extract: the restart asks only about the invoices not answered.
func TestCrashInExtract(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newNight(t, 0)
	fault := "extract.before-write.150=exit@once"
	n.crash(fault)
	n.start("CAIRN_FAULTS=" + fault)
	n.waitStatus(runLimit, kc.Done)
	n.assertTruth()
	if c := n.audit(); c["extractor.called"] != 312 {
		t.Errorf("extractor calls %d, want 312: no finished invoice asked again", c["extractor.called"])
	}
}

// approveUnclear waits for the night's generation to stop before debit-notes, which cannot be undone,
// because its evidence is unclear (why), checks that nothing of debit-notes was sent, and
// approves the evidence as a registered approver.
func (n *night) approveUnclear(generation int, why string) {
	n.t.Helper()
	rec := n.waitRecord(runLimit, fmt.Sprintf("generation %d waiting, done or handed over", generation), func(r *kc.Record) bool {
		return r.Generation == generation && (r.Status == kc.WaitingApproval || r.Status == kc.Done || r.Status == kc.HandedOver)
	})
	if rec.Status != kc.WaitingApproval || rec.Approval == nil || rec.Approval.Step != job.DebitNotes || !strings.Contains(rec.NextAction, why) {
		n.t.Fatalf("the night is %s (approval %+v, next: %s); want it waiting before debit-notes saying %q", rec.Status, rec.Approval, rec.NextAction, why)
	}
	if st := rec.Step(job.DebitNotes).Status; st != kc.Pending {
		n.t.Fatalf("debit-notes is %s while the night waits, want pending", st)
	}
	if keys := n.mailKeys(); len(keys) != 0 {
		n.t.Fatalf("mail sent before the approval: %v", keys)
	}
	n.publish(events.RunSubject(runID, events.VerbApprove), signedApprove(n.t, rec, "asha", n.approver("asha")))
}

// Two invoices nobody can read are parked: the night stops before debit-notes, which cannot
// be undone, naming them (seed 004: stop before what cannot be undone when the evidence is
// unclear), and finishes with the ground truth once a person approves.
func TestUnreadableInvoicesParked(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newNight(t, 2)
	n.start()
	n.startRun()
	n.approveUnclear(0, "2 items parked at extract")
	rec := n.waitStatus(runLimit, kc.Done)
	n.assertTruth()
	n.assertReport(rec)
	ex := rec.Step("extract")
	if ex.ParkedCount != 2 || len(ex.Parked) != 2 {
		t.Fatalf("extract parked %d (%v), want 2", ex.ParkedCount, ex.Parked)
	}
	for i, p := range ex.Parked {
		if p.Item != n.truth.Parked[i].InvoiceNo || p.Reason == "" {
			t.Errorf("parked %+v, want %s with a reason", p, n.truth.Parked[i].InvoiceNo)
		}
	}
}

func TestMalformedStartsRejected(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newNight(t, 0)
	n.start()
	n.publish(events.RunStartSubject, `this is not json`)
	n.publish(events.RunStartSubject, `{"run_id":"run-x","date":"2026-10-13"}`)
	n.publish(events.RunStartSubject, `{"run_id":"bad.id","warehouse":"ldh","date":"2026-10-13"}`)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cons, err := n.js.OrderedConsumer(ctx, assets.StreamRejected, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for len(reasons) < 3 {
		m, err := cons.Next(jetstream.FetchMaxWait(time.Minute))
		if err != nil {
			t.Fatalf("rejections so far %v: %v", reasons, err)
		}
		e, err := events.Decode(natsMsg(m))
		if err != nil {
			t.Fatal(err)
		}
		var r events.Rejected
		if err := e.Unmarshal(&r); err != nil {
			t.Fatal(err)
		}
		if r.Subject != events.RunStartSubject || r.Reason == "" {
			t.Errorf("rejection %+v", r)
		}
		reasons = append(reasons, r.Reason)
	}
	for i, want := range []string{"JSON", "warehouse", "bad.id"} {
		if !contains(reasons[i], want) {
			t.Errorf("rejection %d: %q does not name %q", i, reasons[i], want)
		}
	}
	kv, err := n.js.KeyValue(ctx, assets.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	if keys, err := kv.Keys(ctx); err == nil || len(keys) != 0 {
		t.Errorf("runs created: %v (%v), want none", keys, err)
	}
}
