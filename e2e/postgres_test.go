package e2e

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver

	"github.com/cairnhq/cairn/internal/books"
	"github.com/cairnhq/cairn/internal/pgtest"
	"github.com/cairnhq/cairn/internal/recon"
	"github.com/cairnhq/cairn/pkg/faults"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// The reference night on PostgreSQL, a real server from internal/pgtest, one database per
// test: the ledger alone (CAIRN_LEDGER_DSN=postgres://..., the ERP database SQLite), and
// the ledger and the ERP database both (CAIRN_ERP_DSN=postgres://... too, filled by
// `cairn gen`).

// pgDatabase returns the DSN of a new database and a handle on it. Call it before
// newNight, so that the database is dropped after cairn dev has stopped.
func pgDatabase(t *testing.T) (string, *sql.DB) {
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
	t.Parallel()
	takeNightSlot(t)
	dsn, ledger := pgDatabase(t)
	n := newNight(t, 0)
	n.start("CAIRN_LEDGER_DSN=" + dsn)
	n.startRun()
	rec := n.waitStatus(runLimit, kc.Done)
	n.assertPostgresNight(rec, ledger, n.db("erp.db"), 0)
}

// The whole night on PostgreSQL: `cairn gen` fills the ERP database there (the same truth
// as the SQLite night's), the night reads its purchase orders, receipts and stock levels
// from it and writes the stock store there, and `cairn diff` reads the run back.
func TestPostgresNightWithERP(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	ledgerDSN, ledger := pgDatabase(t)
	erpDSN, erp := pgDatabase(t)
	n := newNight(t, 0)
	// newNight generated into a SQLite ERP: gone, so only PostgreSQL can serve the night.
	sqliteERP, _ := filepath.Glob(filepath.Join(n.dir, "erp.db*"))
	for _, f := range sqliteERP {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	// cairn gen, cairn dev and cairn diff all read the environment.
	pg := []string{"CAIRN_LEDGER_DSN=" + ledgerDSN, "CAIRN_ERP_DSN=" + erpDSN}
	n.env = append(n.env, pg...)
	n.cliEnv = append(n.cliEnv, pg...)
	out, code := n.cli("gen", "--warehouse", warehouse, "--date", date, "--invoices", "312", "--mismatches", "40", "--seed", "1")
	if code != 0 || !strings.Contains(out, "generated 312 invoices") {
		t.Fatalf("cairn gen with the ERP on PostgreSQL (exit %d):\n%s", code, out)
	}
	truth, err := recon.LoadTruth(recon.TruthPath(filepath.Join(n.dir, "truth"), warehouse, date))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(truth, n.truth) {
		t.Fatalf("gen into PostgreSQL wrote another truth than into SQLite:\n%+v\nwant\n%+v", truth, n.truth)
	}
	var lines int
	if err := erp.QueryRow(`SELECT count(*) FROM purchase_orders`).Scan(&lines); err != nil || lines != truth.Report.Lines {
		t.Fatalf("PostgreSQL ERP: %d purchase-order lines (%v), want %d", lines, err, truth.Report.Lines)
	}

	n.start()
	n.startRun()
	rec := n.waitStatus(runLimit, kc.Done)
	n.assertPostgresNight(rec, ledger, erp, 0)
	if _, err := os.Stat(filepath.Join(n.dir, "erp.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("erp.db exists in the data folder (%v): the ERP did not stay on PostgreSQL", err)
	}
	if out, code := n.cli("diff", runID, runID); code != 0 || strings.Contains(out, "differences") {
		t.Errorf("cairn diff of the run with itself on PostgreSQL (exit %d):\n%s", code, out)
	}
}

// The crash that started it, with the ledger on PostgreSQL: the process dies at entry 24
// of post-ledger, starts again, and the ledger ends with every entry once.
func TestPostgresCrashAtLedgerEntry24(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	dsn, ledger := pgDatabase(t)
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
	n.assertPostgresNight(rec, ledger, n.db("erp.db"), 1)
}

// assertPostgresNight is assertNight with the ledger read from PostgreSQL: exactly the
// truth's entries, by key and amount, and none more; the stock store (in erp, SQLite or
// PostgreSQL), the mail, the report and the audit counts as on SQLite.
func (n *night) assertPostgresNight(rec *kc.Record, ledger, erp *sql.DB, restarts int) {
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
	n.assertStockAndMail(erp)
	n.assertReport(rec)
	c := n.audit()
	if c["extractor.called"] != 312 || c["document.read"] != 312 {
		t.Errorf("extractor calls %d, document reads %d, want 312 each (none repeated)", c["extractor.called"], c["document.read"])
	}
	if rec.Restarts != restarts {
		t.Errorf("restarts %d, want %d", rec.Restarts, restarts)
	}
}

// assertStockAndMail is the rest of assertTruth: the stock store in erp, SQLite or
// PostgreSQL, and the mail.
func (n *night) assertStockAndMail(erp *sql.DB) {
	t := n.t
	t.Helper()
	q := func(query string) string { return books.Rebind(books.DialectOf(erp), query) }
	for _, a := range n.truth.Adjustments {
		var q1, v int64
		err := erp.QueryRow(q(`SELECT qty_delta, value_delta_paise FROM stock_adjustments WHERE key = ?`), runID+":stock:"+a.KeySuffix).Scan(&q1, &v)
		if err != nil || q1 != a.QtyDelta || v != a.ValueDeltaPaise {
			t.Errorf("stock adjustment %s: %d/%d (%v), want %d/%d", a.KeySuffix, q1, v, err, a.QtyDelta, a.ValueDeltaPaise)
		}
	}
	var adjustments int
	if err := erp.QueryRow(`SELECT count(*) FROM stock_adjustments`).Scan(&adjustments); err != nil || adjustments != len(n.truth.Adjustments) {
		t.Errorf("stock adjustments: %d (%v), want %d", adjustments, err, len(n.truth.Adjustments))
	}
	for _, l := range n.truth.StockLevelsAfter {
		var q1, v int64
		err := erp.QueryRow(q(`SELECT qty, value_paise FROM stock_levels WHERE warehouse = ? AND sku = ?`), warehouse, l.SKU).Scan(&q1, &v)
		if err != nil || q1 != l.Qty || v != l.ValuePaise {
			t.Errorf("stock level %s: %d/%d (%v), want %d/%d", l.SKU, q1, v, err, l.Qty, l.ValuePaise)
		}
	}
	want := []string{runID + ":report"}
	for _, d := range n.truth.DebitNotes {
		want = append(want, runID+":debit:"+d.SupplierID)
	}
	slices.Sort(want)
	if got := n.mailKeys(); !slices.Equal(got, want) {
		t.Errorf("mail keys %v, want the %d debit notes and the report %v", got, len(n.truth.DebitNotes), want)
	}
}
