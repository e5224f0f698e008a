package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cairnhq/cairn/internal/books"
	"github.com/cairnhq/cairn/internal/recon"
	"github.com/cairnhq/cairn/pkg/assets"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
)

// Same key, different payload: a ledger row that already holds one of the run's keys with
// another amount makes the write fail with an error naming both; the run is handed over,
// never silently skipped, and the row is left as it was.
func TestSameKeyDifferentPayloadHandsOver(t *testing.T) {
	n := newNight(t, 0)
	ctx := context.Background()
	db, err := books.Open(ctx, "sqlite:"+filepath.Join(n.dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	adjs := slices.Clone(n.truth.Adjustments)
	slices.SortFunc(adjs, func(a, b recon.TruthAdjustment) int {
		return strings.Compare(runID+":"+a.KeySuffix, runID+":"+b.KeySuffix)
	})
	a := adjs[23] // the 24th write in key order
	key := runID + ":" + a.KeySuffix
	wrong := a.AmountPaise + 100
	ledger := n.db("ledger.db")
	if _, err := ledger.Exec(`INSERT INTO ledger_entries(key, run_id, invoice_no, line, kind, supplier_id, amount_paise, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, '2026-10-13T21:00:00Z')`, key, runID, a.InvoiceNo, a.Line, a.Kind, a.SupplierID, wrong); err != nil {
		t.Fatal(err)
	}

	n.start()
	n.startRun()
	rec := n.waitStatus(runLimit, kc.HandedOver, kc.Done)
	if rec.Status != kc.HandedOver || rec.Step("post-ledger").Status != kc.Failed {
		t.Fatalf("status %s, post-ledger %s; want handed_over at post-ledger", rec.Status, rec.Step("post-ledger").Status)
	}
	for _, s := range []string{"update-stock", "debit-notes", "report"} {
		if st := rec.Step(s).Status; st != kc.Pending {
			t.Errorf("step %s is %s after the handover, want pending", s, st)
		}
	}
	kv, err := n.js.KeyValue(ctx, assets.BucketHandovers)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, runID)
	if err != nil {
		t.Fatalf("handover note: %v", err)
	}
	var note runner.HandoverNote
	if err := json.Unmarshal(e.Value(), &note); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{key, fmt.Sprintf("amount_paise=%d", wrong), fmt.Sprintf("amount_paise=%d", a.AmountPaise)} {
		if !strings.Contains(note.Error, want) {
			t.Errorf("note error %q does not name %q", note.Error, want)
		}
	}
	if note.Step != "post-ledger" || note.ID != *rec.Handover {
		t.Errorf("note %+v", note)
	}
	var amount int64
	var rows int
	if err := ledger.QueryRow(`SELECT amount_paise FROM ledger_entries WHERE key = ?`, key).Scan(&amount); err != nil || amount != wrong {
		t.Errorf("the conflicting row holds %d (%v), want it untouched at %d", amount, err, wrong)
	}
	if err := ledger.QueryRow(`SELECT count(*) FROM ledger_entries`).Scan(&rows); err != nil || rows != 24 {
		t.Errorf("ledger rows %d (%v), want the 23 written before the conflict and the conflicting one", rows, err)
	}
}
