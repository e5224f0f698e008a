package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairnhq/cairn/internal/rundiff"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// A shadow night writes nothing to the real tables or mail; a real night of the same data,
// run after it, compares equal with it under cairn diff.
func TestShadowNightThenRealNightDiffSame(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newNight(t, 0)
	n.start()
	const shadowRun = "run-2026-10-13-ldh-shadow"
	n.publish(events.RunStartSubject, fmt.Sprintf(`{"run_id":%q,"warehouse":%q,"date":%q,"shadow":true}`, shadowRun, warehouse, date))
	n.waitRunStatus(shadowRun, kc.Done)

	for _, table := range []string{"ledger_entries", "fences"} {
		if rows := n.scalar("ledger.db", "SELECT count(*) FROM "+table); rows != 0 {
			t.Errorf("the shadow night wrote %d rows to the real %s", rows, table)
		}
	}
	if rows := n.scalar("erp.db", "SELECT count(*) FROM stock_adjustments"); rows != 0 {
		t.Errorf("the shadow night wrote %d real stock adjustments", rows)
	}
	for _, l := range n.truth.StockLevelsBefore {
		var q int64
		if err := n.db("erp.db").QueryRow(`SELECT qty FROM stock_levels WHERE warehouse = ? AND sku = ?`, warehouse, l.SKU).Scan(&q); err != nil || q != l.Qty {
			t.Errorf("real stock level %s: %d (%v), want it untouched at %d", l.SKU, q, err, l.Qty)
		}
	}
	if mail := n.mailKeys(); len(mail) != 0 {
		t.Errorf("the shadow night mailed for real: %v", mail)
	}
	shadowMail, _ := filepath.Glob(filepath.Join(n.dir, "mail", "shadow", "*.eml"))
	if len(shadowMail) != len(n.truth.DebitNotes)+1 {
		t.Errorf("shadow mail: %d messages, want %d", len(shadowMail), len(n.truth.DebitNotes)+1)
	}
	if rows := n.scalar("ledger.db", "SELECT count(*) FROM shadow_ledger_entries"); rows != len(n.truth.Adjustments) {
		t.Errorf("shadow ledger rows %d, want %d", rows, len(n.truth.Adjustments))
	}

	n.startRun()
	n.waitStatus(runLimit, kc.Done)
	n.assertTruth()

	out, code := n.cli("diff", shadowRun, runID, "--json")
	var d struct {
		Same  bool           `json:"same"`
		Parts []rundiff.Part `json:"parts"`
	}
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("cairn diff --json (exit %d): %v\n%s", code, err, out)
	}
	if code != 0 || !d.Same || len(d.Parts) != 8+3 {
		t.Fatalf("cairn diff: exit %d, %+v", code, d)
	}

	// A difference is found: a real row changed behind the run's back.
	if _, err := n.db("ledger.db").Exec(`UPDATE ledger_entries SET amount_paise = amount_paise + 1 WHERE rowid = 1`); err != nil {
		t.Fatal(err)
	}
	out, code = n.cli("diff", shadowRun, runID)
	if code != 1 || !strings.Contains(out, "ledger entries") || !strings.Contains(out, "AmountPaise") {
		t.Errorf("cairn diff after a change: exit %d\n%s", code, out)
	}
}
