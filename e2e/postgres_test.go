package e2e

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver

	"github.com/cairnhq/cairn/internal/pgtest"
	"github.com/cairnhq/cairn/pkg/faults"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// The reference night with the ledger on PostgreSQL (CAIRN_LEDGER_DSN=postgres://...), on
// a real server from internal/pgtest, one database per test. The ERP database stays SQLite
// (CAIRN_ERP_DSN unset): it also holds what the night reads, and internal/recon generates
// and reads it in SQLite's SQL.

// pgLedger returns the DSN of a new ledger database and a handle on it. Call it before
// newNight, so that the database is dropped after cairn dev has stopped.
func pgLedger(t *testing.T) (string, *sql.DB) {
	t.Helper()
	dsn := pgtest.DSN(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return dsn, db
}

func ledgerRows(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM ledger_entries`).Scan(&n); err != nil {
		t.Fatalf("counting the PostgreSQL ledger: %v", err)
	}
	return n
}

func TestPostgresNight(t *testing.T) {
	dsn, ledger := pgLedger(t)
	n := newNight(t, 0)
	n.start("CAIRN_LEDGER_DSN=" + dsn)
	n.startRun()
	rec := n.waitStatus(runLimit, kc.Done)
	n.assertPostgresNight(rec, ledger, 0)
}

// The crash that started it, with the ledger on PostgreSQL: the process dies at entry 24
// of post-ledger, starts again, and the ledger ends with every entry once.
func TestPostgresCrashAtLedgerEntry24(t *testing.T) {
	dsn, ledger := pgLedger(t)
	n := newNight(t, 0)
	fault := "post-ledger.before-write.24=exit@once"
	n.start("CAIRN_LEDGER_DSN="+dsn, "CAIRN_FAULTS="+fault)
	n.startRun()
	code, err := n.dev.Wait(runLimit)
	if err != nil {
		t.Fatal(err)
	}
	if code != faults.ExitCode {
		t.Fatalf("cairn dev exited %d, want %d from the injected fault (log %s)", code, faults.ExitCode, n.dev.Log)
	}
	if !faults.Fired(filepath.Join(n.dir, "faults"), fault) {
		t.Fatalf("the @once marker of %s is missing: the fault never fired", fault)
	}
	if rows := ledgerRows(t, ledger); rows != 23 {
		t.Fatalf("after the crash the ledger holds %d rows, want 23", rows)
	}
	n.start("CAIRN_LEDGER_DSN="+dsn, "CAIRN_FAULTS="+fault)
	rec := n.waitStatus(runLimit, kc.Done)
	n.assertPostgresNight(rec, ledger, 1)
}

// assertPostgresNight is assertNight with the ledger read from PostgreSQL: exactly the
// truth's entries, by key and amount, and none more; the stock store, the mail, the report
// and the audit counts as on SQLite.
func (n *night) assertPostgresNight(rec *kc.Record, ledger *sql.DB, restarts int) {
	t := n.t
	t.Helper()
	if _, err := os.Stat(filepath.Join(n.dir, "ledger.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ledger.db exists in the data folder (%v): the ledger did not go to PostgreSQL alone", err)
	}
	want := map[string]int64{}
	for _, a := range n.truth.Adjustments {
		want[runID+":"+a.KeySuffix] = a.AmountPaise
	}
	rows, err := ledger.QueryContext(context.Background(), `SELECT key, amount_paise, reverses IS NOT NULL FROM ledger_entries`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]int64{}
	count := 0
	for rows.Next() {
		var (
			key      string
			amount   int64
			reversal bool
		)
		if err := rows.Scan(&key, &amount, &reversal); err != nil {
			t.Fatal(err)
		}
		if reversal {
			t.Errorf("ledger row %s is a reversal on a night with nothing to undo", key)
		}
		got[key] = amount
		count++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(want) != 40 {
		t.Errorf("the truth has %d adjustments, the reference night 40", len(want))
	}
	if count != len(want) || len(got) != len(want) {
		t.Errorf("ledger: %d rows, want %d", count, len(want))
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("ledger entry %s: %d (present %v), want %d", k, g, ok, v)
		}
	}
	n.assertStockAndMail()
	n.assertReport(rec)
	c := n.audit()
	if c["extractor.called"] != 312 || c["document.read"] != 312 {
		t.Errorf("extractor calls %d, document reads %d, want 312 each (none repeated)", c["extractor.called"], c["document.read"])
	}
	if rec.Restarts != restarts {
		t.Errorf("restarts %d, want %d", rec.Restarts, restarts)
	}
}

// assertStockAndMail is the rest of assertTruth: the SQLite stock store and the mail.
func (n *night) assertStockAndMail() {
	t := n.t
	t.Helper()
	erp := n.db("erp.db")
	for _, a := range n.truth.Adjustments {
		var q, v int64
		err := erp.QueryRow(`SELECT qty_delta, value_delta_paise FROM stock_adjustments WHERE key = ?`, runID+":stock:"+a.KeySuffix).Scan(&q, &v)
		if err != nil || q != a.QtyDelta || v != a.ValueDeltaPaise {
			t.Errorf("stock adjustment %s: %d/%d (%v), want %d/%d", a.KeySuffix, q, v, err, a.QtyDelta, a.ValueDeltaPaise)
		}
	}
	var adjustments int
	if err := erp.QueryRow(`SELECT count(*) FROM stock_adjustments`).Scan(&adjustments); err != nil || adjustments != len(n.truth.Adjustments) {
		t.Errorf("stock adjustments: %d (%v), want %d", adjustments, err, len(n.truth.Adjustments))
	}
	for _, l := range n.truth.StockLevelsAfter {
		var q, v int64
		err := erp.QueryRow(`SELECT qty, value_paise FROM stock_levels WHERE warehouse = ? AND sku = ?`, warehouse, l.SKU).Scan(&q, &v)
		if err != nil || q != l.Qty || v != l.ValuePaise {
			t.Errorf("stock level %s: %d/%d (%v), want %d/%d", l.SKU, q, v, err, l.Qty, l.ValuePaise)
		}
	}
	files, _ := filepath.Glob(filepath.Join(n.dir, "mail", "*.eml"))
	if len(files) != len(n.truth.DebitNotes)+1 {
		t.Errorf("mail: %d messages, want %d debit notes + 1 report", len(files), len(n.truth.DebitNotes))
	}
}
