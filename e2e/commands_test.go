package e2e

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairnhq/cairn/pkg/faults"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// stalled starts the night with post-ledger stalling at its 10th entry for stall, its lease
// standing the whole time (CAIRN_LEASE longer than the stall), and waits until it stalls.
func stalled(t *testing.T, stall string) *night {
	t.Helper()
	n := newNight(t, 0)
	fault := "post-ledger.before-write.10=stall:" + stall + "@once"
	n.start("CAIRN_FAULTS="+fault, "CAIRN_LEASE=90s", "CAIRN_ACK_WAIT=90s")
	n.startRun()
	if !poll(runLimit, func() bool { return faults.Fired(filepath.Join(n.dir, "faults"), fault) }) {
		t.Fatalf("%s did not fire", fault)
	}
	return n
}

// Undo of a running run whose post-ledger step stalls holding its lease for 60 s: the undo
// waits in the record, far longer than the compensator durable's MaxDeliver of redeliveries
// would last, and once the step lets go the run is undone: every ledger key nets to zero,
// stock is back at its before-levels, and `cairn undo --wait` reports it.
func TestUndoWaitsForAStalledStep(t *testing.T) {
	t.Parallel() // mostly waiting (a stall, an outage, a grace): see TestMain
	n := stalled(t, "60s")
	out, code := n.cli("undo", runID, "--wait")
	if code != 0 {
		t.Fatalf("cairn undo --wait exited %d:\n%s", code, out)
	}
	if !strings.Contains(out, "waits for the run's lease") || !strings.Contains(out, string(kc.Undone)) {
		t.Errorf("cairn undo --wait said:\n%s\nwant the wait, then the run undone", out)
	}
	rec := n.undone(kc.Undone)
	if rec.Lease != nil || len(rec.Commands) != 0 || rec.Undo.Reversed == 0 {
		t.Errorf("undone record: lease %+v, waiting %+v, undo %+v", rec.Lease, rec.Commands, rec.Undo)
	}
	n.assertNetZero(9)
}

// A resume of a run cancelled while its step stalls holding the lease waits in the record
// for longer than the control durable's MaxDeliver; once the step lets go the run goes on
// and ends equal to the ground truth, and `cairn resume --wait` reports it done.
func TestResumeWaitsForAStalledStep(t *testing.T) {
	t.Parallel() // mostly waiting (a stall, an outage, a grace): see TestMain
	n := stalled(t, "40s")
	if out, code := n.cli("cancel", runID); code != 0 {
		t.Fatalf("cairn cancel exited %d:\n%s", code, out)
	}
	out, code := n.cli("resume", runID, "--wait")
	if code != 0 {
		t.Fatalf("cairn resume --wait exited %d:\n%s", code, out)
	}
	if !strings.Contains(out, "waits for the run's lease") || !strings.Contains(out, string(kc.Done)) {
		t.Errorf("cairn resume --wait said:\n%s\nwant the wait, then the run done", out)
	}
	rec := n.waitStatus(runLimit, kc.Done)
	if len(rec.Commands) != 0 {
		t.Errorf("waiting %+v after the run is done", rec.Commands)
	}
	n.assertTruth()
}

// The compensator dies right after it wrote the waiting undo into the record (its message
// never acked), while post-ledger stalls: after the restart the dead step's lease is
// released, the supervisor's sweep sends the waiting undo again, and the run ends undone.
func TestWaitingUndoSurvivesACrash(t *testing.T) {
	t.Parallel() // mostly waiting (a stall, an outage, a grace): see TestMain
	n := newNight(t, 0)
	stall, crash := "post-ledger.before-write.10=stall:60s@once", "undo.after-record=exit@once"
	n.start("CAIRN_FAULTS=" + stall + "," + crash)
	n.startRun()
	if !poll(runLimit, func() bool { return faults.Fired(filepath.Join(n.dir, "faults"), stall) }) {
		t.Fatalf("%s did not fire", stall)
	}
	n.publish("cairn.runs."+runID+".undo", `{"request_id":"undo-crash"}`)
	if code, err := n.dev.Wait(runLimit); err != nil || code != faults.ExitCode {
		t.Fatalf("cairn dev ended with %d (%v), want the fault's exit %d", code, err, faults.ExitCode)
	}
	if !faults.Fired(filepath.Join(n.dir, "faults"), crash) {
		t.Fatalf("%s did not fire", crash)
	}
	n.start("CAIRN_FAULTS=" + stall + "," + crash)
	rec := n.undone(kc.Undone)
	if !rec.HasRequest("undo-crash") || len(rec.Commands) != 0 {
		t.Errorf("requests %v, waiting %+v: want the undo carried out, nothing waiting", rec.Requests, rec.Commands)
	}
	n.assertNetZero(9)
}

// assertNetZero checks an undone run: every ledger key (at least min of them) is its entry
// and its reversal, netting to zero, and the stock is back at the night's before-levels.
func (n *night) assertNetZero(min int) {
	t := n.t
	t.Helper()
	rows, err := n.db("ledger.db").Query(`SELECT coalesce(reverses, key), sum(amount_paise), count(*) FROM ledger_entries GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	keys := 0
	for rows.Next() {
		var k string
		var sum, count int64
		if err := rows.Scan(&k, &sum, &count); err != nil {
			t.Fatal(err)
		}
		keys++
		if sum != 0 || count != 2 {
			t.Errorf("ledger key %s: %d rows netting %d, want the entry and its reversal netting 0", k, count, sum)
		}
	}
	rows.Close()
	if keys < min {
		t.Errorf("%d ledger keys, want at least %d", keys, min)
	}
	for _, l := range n.truth.StockLevelsBefore {
		var q, v int64
		if err := n.db("erp.db").QueryRow(`SELECT qty, value_paise FROM stock_levels WHERE warehouse = ? AND sku = ?`, warehouse, l.SKU).Scan(&q, &v); err != nil || q != l.Qty || v != l.ValuePaise {
			t.Errorf("stock level %s: %d/%d (%v), want the night's before-level %d/%d", l.SKU, q, v, err, l.Qty, l.ValuePaise)
		}
	}
}
