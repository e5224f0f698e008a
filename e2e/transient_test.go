package e2e

import (
	"testing"
	"time"

	"github.com/cairnhq/cairn/internal/books"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// A PostgreSQL backend of the ledger terminated (pg_terminate_backend) in the middle of
// post-ledger: the write it was making fails with 57P01 and the connection is gone. That
// is temporary: the step tries the item again on a new connection (an item retry, no
// failed attempt, no handover), and the night equals the ground truth, every ledger entry
// once.
func TestPostgresBackendTerminatedInPostLedger(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	dsn, ledger := pgDatabase(t)
	n := newNight(t, 0)
	// The ledger's tables, as the services create them, so that the key can be held first.
	tables, err := books.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	tables.Close()
	n.start("CAIRN_LEDGER_DSN="+dsn, anyPort)
	metrics := n.metricsAddr()

	// The 20th entry's key, held by an open transaction of ours that inserted it: post-ledger
	// writes the 19 before it and then waits inside its own transaction, on its connection.
	if len(n.truth.Adjustments) < 20 {
		t.Fatalf("the truth has %d adjustments", len(n.truth.Adjustments))
	}
	key := runID + ":" + n.truth.Adjustments[19].KeySuffix
	blocker, err := ledger.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback()
	if _, err := blocker.Exec(`INSERT INTO ledger_entries (key, run_id, invoice_no, line, kind, supplier_id, amount_paise, created_at)
		VALUES ($1, $2, 'HELD', 1, 'price', 'SUP-HELD', 1, '2026-10-13T22:00:00Z')`, key, runID); err != nil {
		t.Fatal(err)
	}

	n.startRun()
	var pid int
	if !poll(runLimit, func() bool {
		err := ledger.QueryRow(`SELECT pid FROM pg_stat_activity WHERE datname = current_database()
			AND pid <> pg_backend_pid() AND wait_event_type = 'Lock' LIMIT 1`).Scan(&pid)
		return err == nil
	}) {
		t.Fatal("post-ledger never waited on the held key")
	}
	written := ledgerRows(t, ledger)
	t.Logf("terminating backend %d with %d ledger rows written", pid, written)
	var terminated bool
	if err := ledger.QueryRow(`SELECT pg_terminate_backend($1)`, pid).Scan(&terminated); err != nil || !terminated {
		t.Fatalf("pg_terminate_backend(%d): %t, %v", pid, terminated, err)
	}
	if err := blocker.Rollback(); err != nil {
		t.Fatal(err)
	}

	rec := n.waitStatus(runLimit, kc.Done, kc.HandedOver)
	st := rec.Step("post-ledger")
	if rec.Status != kc.Done {
		t.Fatalf("status %s, post-ledger %s (%s): want done, the terminated write retried", rec.Status, st.Status, lastError(st))
	}
	if written < 1 || written >= 40 {
		t.Errorf("%d ledger rows when the backend was terminated, want it in the middle of the step", written)
	}
	n.assertPostgresNight(rec, ledger, n.db("erp.db"), 0)
	if st.Attempts != 0 {
		t.Errorf("post-ledger failed %d attempts, want 0: the item retry mends it", st.Attempts)
	}
	if c := n.audit(); c["handover"] != 0 || c["step.failed"] != 0 {
		t.Errorf("audit %v: want no handover and no failed attempt", c)
	}
	key = `cairn_retries_total{kind="item",step="post-ledger"}`
	if !poll(30*time.Second, func() bool { m, err := scrape(metrics); return err == nil && metricValue(m, key) >= 1 }) {
		m, err := scrape(metrics)
		t.Errorf("%s = %v (%v), want at least 1", key, metricValue(m, key), err)
	}
}

func lastError(s *kc.Step) string {
	if s.LastError == nil {
		return "no error"
	}
	return *s.LastError
}
