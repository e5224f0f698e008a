package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cairnhq/cairn/internal/recon"
	"github.com/cairnhq/cairn/pkg/faults"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// supplierWithMost is the supplier with the most adjustments in the night.
func (n *night) supplierWithMost() (string, []recon.TruthAdjustment) {
	by := map[string][]recon.TruthAdjustment{}
	best := ""
	for _, a := range n.truth.Adjustments {
		by[a.SupplierID] = append(by[a.SupplierID], a)
		if best == "" || len(by[a.SupplierID]) > len(by[best]) || (len(by[a.SupplierID]) == len(by[best]) && a.SupplierID < best) {
			best = a.SupplierID
		}
	}
	return best, by[best]
}

// undone waits until the run's undo request is finished and the run is at status.
func (n *night) undone(status kc.Status) *kc.Record {
	n.t.Helper()
	return n.waitRecord(runLimit, "the undo finished", func(r *kc.Record) bool {
		return r.Undo != nil && r.Undo.Cursor == r.Undo.Total && r.Status == status
	})
}

// assertSupplierUndone checks that exactly sup's entries, stock adjustments and debit note
// were reversed, once each, newest first, and nothing of any other supplier.
func (n *night) assertSupplierUndone(sup string, adjs []recon.TruthAdjustment) {
	t := n.t
	t.Helper()
	ledger := n.db("ledger.db")
	rows, err := ledger.Query(`SELECT key, amount_paise, reverses, created_at FROM ledger_entries WHERE reverses IS NOT NULL ORDER BY rowid`)
	if err != nil {
		t.Fatal(err)
	}
	var revKeys []string
	var lastLedger string
	got := map[string]int64{}
	for rows.Next() {
		var k, rev, at string
		var v int64
		if err := rows.Scan(&k, &v, &rev, &at); err != nil {
			t.Fatal(err)
		}
		revKeys = append(revKeys, rev)
		got[rev] = v
		lastLedger = at
	}
	rows.Close()
	var want []string
	for _, a := range adjs {
		key := runID + ":" + a.KeySuffix
		want = append(want, key)
		if got[key] != -a.AmountPaise {
			t.Errorf("reversal of %s: %d, want %d", key, got[key], -a.AmountPaise)
		}
	}
	slices.Sort(want)
	slices.Reverse(want) // newest first: keys descending
	if !slices.Equal(revKeys, want) {
		t.Errorf("ledger reversals in the order made %v, want %v", revKeys, want)
	}
	// Stock: the supplier's adjustments reversed, before the ledger's (newest step first).
	var stockRevs int
	var firstStock string
	if err := n.db("erp.db").QueryRow(`SELECT count(*), coalesce(min(created_at), '') FROM stock_adjustments WHERE reverses IS NOT NULL`).Scan(&stockRevs, &firstStock); err != nil {
		t.Fatal(err)
	}
	var lastStock string
	_ = n.db("erp.db").QueryRow(`SELECT coalesce(max(created_at), '') FROM stock_adjustments WHERE reverses IS NOT NULL`).Scan(&lastStock)
	if stockRevs != len(adjs) {
		t.Errorf("stock reversals %d, want %d", stockRevs, len(adjs))
	}
	var firstLedger string
	_ = ledger.QueryRow(`SELECT min(created_at) FROM ledger_entries WHERE reverses IS NOT NULL`).Scan(&firstLedger)
	if lastStock > firstLedger {
		t.Errorf("the last stock reversal (%s) came after the first ledger reversal (%s): update-stock's effects are newer", lastStock, firstLedger)
	}
	_ = lastLedger
	levels := map[string][2]int64{}
	for _, l := range n.truth.StockLevelsAfter {
		levels[l.SKU] = [2]int64{l.Qty, l.ValuePaise}
	}
	for _, a := range adjs {
		l := levels[a.SKU]
		levels[a.SKU] = [2]int64{l[0] - a.QtyDelta, l[1] - a.ValueDeltaPaise}
	}
	for sku, l := range levels {
		var q, v int64
		if err := n.db("erp.db").QueryRow(`SELECT qty, value_paise FROM stock_levels WHERE warehouse = ? AND sku = ?`, warehouse, sku).Scan(&q, &v); err != nil || q != l[0] || v != l[1] {
			t.Errorf("stock level %s: %d/%d (%v), want %d/%d", sku, q, v, err, l[0], l[1])
		}
	}
	// Mail: the supplier's note withdrawn (it had gone), nothing else. The undo ends when the
	// withdrawal is queued; the outbox sender delivers it after.
	withdraw := runID + ":debit:" + sup + ":withdraw"
	n.waitMail(withdraw, runLimit)
	keys := n.mailKeys()
	if !slices.Contains(keys, withdraw) || len(keys) != len(n.truth.DebitNotes)+2 {
		t.Errorf("mail %v: want every note, the report and %s", keys, withdraw)
	}
	body := n.mailBody(withdraw)
	if !strings.Contains(body, "X-Cairn-Withdraws: "+runID+":debit:"+sup) || !strings.Contains(body, "withdraws our claim") {
		t.Errorf("the withdrawal does not name the claim it withdraws:\n%s", body)
	}
}

// The supplier story: undo for one supplier reverses exactly its entries, its stock
// adjustments and its debit note (a withdrawal sent), newest first, and nothing of the
// other suppliers; undoing again reverses nothing twice.
func TestUndoOneSupplier(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newNight(t, 0)
	n.start()
	n.startRun()
	n.waitStatus(runLimit, kc.Done)
	sup, adjs := n.supplierWithMost()
	if out, code := n.cli("undo", runID, "--supplier", sup, "--wait"); code != 0 {
		t.Fatalf("cairn undo exited %d:\n%s", code, out)
	}
	rec := n.undone(kc.Done)
	if rec.Undo.Total != 2*len(adjs)+1 || rec.Undo.Reversed != rec.Undo.Total {
		t.Errorf("undo %+v: want %d effects (entries, adjustments, the note), all reversed", rec.Undo, 2*len(adjs)+1)
	}
	n.assertSupplierUndone(sup, adjs)

	// Again: nothing reversed twice.
	if out, code := n.cli("undo", runID, "--supplier", sup, "--wait"); code != 0 {
		t.Fatalf("second cairn undo exited %d:\n%s", code, out)
	}
	rec = n.undone(kc.Done)
	if rec.Undo.Reversed != 0 {
		t.Errorf("the second undo reversed %d effects, want 0", rec.Undo.Reversed)
	}
	n.assertSupplierUndone(sup, adjs)
}

// A crash in the middle of an undo, then a restart: the undo resumes from its cursor and
// each reversal exists exactly once.
func TestUndoCrashResumes(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newNight(t, 0)
	fault := "undo.before-write.3=exit@once"
	n.start("CAIRN_FAULTS=" + fault)
	n.startRun()
	n.waitStatus(runLimit, kc.Done)
	sup, adjs := n.supplierWithMost()
	n.publish(fmt.Sprintf("cairn.runs.%s.undo", runID), fmt.Sprintf(`{"scope":{"supplier":%q}}`, sup))
	code, err := n.dev.Wait(runLimit)
	if err != nil || code != faults.ExitCode {
		t.Fatalf("cairn dev ended with %d (%v), want the fault's exit %d", code, err, faults.ExitCode)
	}
	n.start("CAIRN_FAULTS=" + fault)
	rec := n.undone(kc.Done)
	if rec.Undo.Total != 2*len(adjs)+1 {
		t.Errorf("undo %+v", rec.Undo)
	}
	n.assertSupplierUndone(sup, adjs)
}

// mailBody returns the raw mail of key.
func (n *night) mailBody(key string) string {
	n.t.Helper()
	for _, k := range n.mailKeys() {
		if k == key {
			return n.mailByKey(key)
		}
	}
	return ""
}

func (n *night) mailByKey(key string) string {
	n.t.Helper()
	h := sha256.Sum256([]byte(key))
	b, err := os.ReadFile(filepath.Join(n.dir, "mail", hex.EncodeToString(h[:])+".eml"))
	if err != nil {
		n.t.Fatal(err)
	}
	return string(b)
}

// Undo of a whole run: the ledger's net total for the run is zero, stock levels are back to
// the night's before-levels, every message withdrawn, and the run undone.
func TestUndoWholeRun(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newNight(t, 0)
	n.start()
	n.startRun()
	n.waitStatus(runLimit, kc.Done)
	if out, code := n.cli("undo", runID, "--wait"); code != 0 {
		t.Fatalf("cairn undo exited %d:\n%s", code, out)
	}
	rec := n.undone(kc.Undone)
	if rec.Undo.Total != 2*len(n.truth.Adjustments)+len(n.truth.DebitNotes)+1 || rec.Lease != nil {
		t.Errorf("undo %+v, lease %+v", rec.Undo, rec.Lease)
	}
	if sum := n.scalar("ledger.db", `SELECT coalesce(sum(amount_paise), 0) FROM ledger_entries`); sum != 0 {
		t.Errorf("the run's ledger total after the undo is %d, want 0", sum)
	}
	for _, l := range n.truth.StockLevelsBefore {
		var q, v int64
		if err := n.db("erp.db").QueryRow(`SELECT qty, value_paise FROM stock_levels WHERE warehouse = ? AND sku = ?`, warehouse, l.SKU).Scan(&q, &v); err != nil || q != l.Qty || v != l.ValuePaise {
			t.Errorf("stock level %s: %d/%d (%v), want the night's before-level %d/%d", l.SKU, q, v, err, l.Qty, l.ValuePaise)
		}
	}
	if !poll(runLimit, func() bool { return len(n.mailKeys()) == 2*(len(n.truth.DebitNotes)+1) }) {
		t.Errorf("mail %v: want every message and its withdrawal", n.mailKeys())
	}
}
