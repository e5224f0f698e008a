package e2e

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/cairnhq/cairn/internal/recon"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// Four warehouses' nights at once, through one cairn dev whose step services each work on up
// to four runs at a time (CAIRN_STEP_CONCURRENCY): every night equals its own ground truth,
// and no row or mail of one run is written twice or under another run.
func TestConcurrentNights(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newNight(t, 0)
	truths := map[string]recon.Truth{runID: n.truth}
	for i := range 3 {
		wh := fmt.Sprintf("w%02d", i+1)
		truth, err := recon.Generate(context.Background(), recon.GenConfig{Warehouse: wh, Date: date, Invoices: 40,
			Mismatches: 6, Seed: int64(i + 2), InboxDir: filepath.Join(n.dir, "inbox"),
			ERPPath: filepath.Join(n.dir, "erp.db"), TruthDir: filepath.Join(n.dir, "truth-"+wh)})
		if err != nil {
			t.Fatal(err)
		}
		truths["run-"+date+"-"+wh] = truth
	}
	n.start("CAIRN_STEP_CONCURRENCY=4")
	for run, truth := range truths {
		n.publish(events.RunStartSubject, fmt.Sprintf(`{"run_id":%q,"warehouse":%q,"date":%q}`, run, truth.Warehouse, date))
	}
	for run := range truths {
		n.waitRunStatus(run, kc.Done)
	}

	ledger := n.rowsByKey(n.db("ledger.db"), `SELECT key, amount_paise, 0 FROM ledger_entries WHERE reverses IS NULL`)
	erp := n.db("erp.db")
	stock := n.rowsByKey(erp, `SELECT key, qty_delta, value_delta_paise FROM stock_adjustments WHERE reverses IS NULL`)
	mails, _ := filepath.Glob(filepath.Join(n.dir, "mail", "*.eml"))
	wantLedger, wantMails := 0, 0
	for run, truth := range truths {
		wantLedger += len(truth.Adjustments)
		wantMails += len(truth.DebitNotes) + 1
		for _, a := range truth.Adjustments {
			if g, ok := ledger[run+":"+a.KeySuffix]; !ok || g[0] != a.AmountPaise {
				t.Errorf("ledger %s:%s: %v (present %v), want %d", run, a.KeySuffix, g, ok, a.AmountPaise)
			}
			if g := stock[run+":stock:"+a.KeySuffix]; g != [2]int64{a.QtyDelta, a.ValueDeltaPaise} {
				t.Errorf("stock adjustment %s:%s: %v, want %d/%d", run, a.KeySuffix, g, a.QtyDelta, a.ValueDeltaPaise)
			}
		}
		for _, l := range truth.StockLevelsAfter {
			var q, v int64
			if err := erp.QueryRow(`SELECT qty, value_paise FROM stock_levels WHERE warehouse = ? AND sku = ?`, truth.Warehouse, l.SKU).Scan(&q, &v); err != nil {
				t.Fatalf("stock level %s %s: %v", truth.Warehouse, l.SKU, err)
			}
			if q != l.Qty || v != l.ValuePaise {
				t.Errorf("stock level %s %s: %d/%d, want %d/%d", truth.Warehouse, l.SKU, q, v, l.Qty, l.ValuePaise)
			}
		}
		keys := []string{run + ":report"}
		for _, d := range truth.DebitNotes {
			keys = append(keys, run+":debit:"+d.SupplierID)
		}
		for _, k := range keys {
			h := sha256.Sum256([]byte(k))
			if _, err := os.Stat(filepath.Join(n.dir, "mail", hex.EncodeToString(h[:])+".eml")); err != nil {
				t.Errorf("mail %s: %v", k, err)
			}
		}
	}
	if len(ledger) != wantLedger || len(stock) != wantLedger || len(mails) != wantMails {
		t.Errorf("%d ledger rows, %d stock adjustments, %d mails; want %d, %d, %d", len(ledger), len(stock), len(mails), wantLedger, wantLedger, wantMails)
	}
}

// rowsByKey reads (key, a, b) rows into a map, failing on a key seen twice.
func (n *night) rowsByKey(db *sql.DB, query string) map[string][2]int64 {
	n.t.Helper()
	rows, err := db.Query(query)
	if err != nil {
		n.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][2]int64{}
	for rows.Next() {
		var k string
		var a, b int64
		if err := rows.Scan(&k, &a, &b); err != nil {
			n.t.Fatal(err)
		}
		if _, dup := out[k]; dup {
			n.t.Errorf("%s twice", k)
		}
		out[k] = [2]int64{a, b}
	}
	if err := rows.Err(); err != nil {
		n.t.Fatal(err)
	}
	return out
}
