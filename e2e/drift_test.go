package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	job "github.com/cairnhq/cairn/internal/night"
	"github.com/cairnhq/cairn/internal/recon"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
)

// The drift rule: whenever a run continues after a break (here a resume, and a restart
// after a crash between two steps) its source is checked before any outside write.

// A run handed over before post-ledger wrote anything, a document changed, and `cairn
// resume`: the run is handed over again naming the document, and no ledger row is written.
func TestDriftOnResume(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newLoggedNight(t)
	fault := "post-ledger.before-write.1=error:unknown@once"
	n.start("CAIRN_FAULTS=" + fault)
	n.startRun()
	rec := n.waitStatus(runLimit, kc.HandedOver, kc.Done)
	if rec.Status != kc.HandedOver || n.count("ledger.db", "ledger_entries") != 0 {
		t.Fatalf("status %s with %d ledger rows, want handed over by %s before any row", rec.Status, n.count("ledger.db", "ledger_entries"), fault)
	}
	first := *rec.Handover
	no := n.reviseInvoice()

	n.publish(events.RunSubject(runID, events.VerbResume), `{}`)
	rec = n.waitRecord(runLimit, "handed over again or done", func(r *kc.Record) bool {
		return r.Status == kc.Done || (r.Status == kc.HandedOver && r.Handover != nil && *r.Handover != first)
	})
	n.assertDriftHandover(rec, job.PostLedger, no)
}

// A crash right after compare's commit, before post-ledger takes its lease; a document
// changes; the restarted process hands the run over before post-ledger writes anything.
func TestDriftAfterCrashBetweenSteps(t *testing.T) {
	t.Parallel()
	for _, fault := range []string{"compare.after-commit=exit@once", "compare.before-next-publish=exit@once"} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			takeNightSlot(t)
			n := newLoggedNight(t)
			n.start("CAIRN_FAULTS=" + fault)
			n.startRun()
			n.waitExit(fault)
			no := n.reviseInvoice()
			n.start("CAIRN_FAULTS=" + fault)
			rec := n.waitStatus(runLimit, kc.HandedOver, kc.Done)
			n.assertDriftHandover(rec, job.PostLedger, no)
		})
	}
}

// reviseInvoice appends a line to the first mismatching invoice of the night and returns
// its number.
func (n *night) reviseInvoice() string {
	n.t.Helper()
	no := n.truth.Adjustments[0].InvoiceNo
	path := filepath.Join(recon.NightDir(filepath.Join(n.dir, "inbox"), warehouse, date), no+".txt")
	b, err := os.ReadFile(path)
	if err != nil {
		n.t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, "Note: revised copy\n"...), 0o644); err != nil {
		n.t.Fatal(err)
	}
	return no
}

// assertDriftHandover checks that rec is handed over at step for a changed source naming
// invoice no, by a note that names it, with nothing written to the ledger or the stock.
func (n *night) assertDriftHandover(rec *kc.Record, step, no string) {
	n.t.Helper()
	if rec.Status != kc.HandedOver {
		n.t.Fatalf("run %s after %s changed, want handed_over", rec.Status, no)
	}
	s := rec.Step(step)
	if s.Status != kc.Failed || s.LastError == nil || !strings.Contains(*s.LastError, no) || !strings.Contains(*s.LastError, runner.ErrSourceChanged.Error()) {
		n.t.Errorf("%s %s, last error %v; want failed, naming the changed source and %s", step, s.Status, s.LastError, no)
	}
	kv, err := n.js.KeyValue(context.Background(), assets.BucketHandovers)
	if err != nil {
		n.t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), runID)
	if err != nil {
		n.t.Fatal(err)
	}
	var note runner.HandoverNote
	if err := json.Unmarshal(e.Value(), &note); err != nil {
		n.t.Fatal(err)
	}
	if rec.Handover == nil || note.ID != *rec.Handover || note.Step != step || !strings.Contains(note.Error, no) {
		n.t.Errorf("handover note %+v (record's %v), want the step %s naming %s", note, rec.Handover, step, no)
	}
	if got := n.count("ledger.db", "ledger_entries"); got != 0 {
		n.t.Errorf("the ledger holds %d rows written after the source changed, want 0", got)
	}
	if got := n.count("erp.db", "stock_adjustments"); got != 0 {
		n.t.Errorf("%d stock adjustments written after the source changed, want 0", got)
	}
}
