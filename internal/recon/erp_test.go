package recon

import (
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cairnhq/cairn/internal/books"
	"github.com/cairnhq/cairn/internal/pgtest"
)

// erpBackend is one database the ERP can live in: every ERP test runs against each.
// PostgreSQL is a real server (internal/pgtest), whose test databases sort by ICU en-US,
// not by byte; it is skipped only where none can be had and CI is unset.
type erpBackend struct {
	name string
	// dsn returns the DSN of a new, empty database that lives as long as t.
	dsn func(t *testing.T) string
}

var erpBackends = []erpBackend{
	{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "erp.db") }},
	{"postgres", func(t *testing.T) string { return pgtest.DSN(t) }},
}

// forEachERP runs test as a parallel subtest per backend, with the DSN of a new database.
func forEachERP(t *testing.T, test func(t *testing.T, dsn string)) {
	t.Helper()
	t.Parallel()
	for _, b := range erpBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			test(t, b.dsn(t))
		})
	}
}

// openERP opens dsn with OpenERP, closed in t.Cleanup.
func openERP(t *testing.T, dsn string) *books.DB {
	t.Helper()
	db, err := OpenERP(t.Context(), dsn)
	if err != nil {
		t.Fatalf("OpenERP: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// exec runs a query written with ? placeholders on db.
func exec(t *testing.T, db *books.DB, query string, args ...any) {
	t.Helper()
	if _, err := db.SQL().ExecContext(t.Context(), books.Rebind(db.Dialect(), query), args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func countRows(t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM `+table).Scan(&n); err != nil {
		t.Fatalf("counting %s: %v", table, err)
	}
	return n
}

func TestERPLoads(t *testing.T) {
	forEachERP(t, func(t *testing.T, dsn string) {
		ctx := t.Context()
		db := openERP(t, dsn)
		// Lower case sorts after every upper-case letter byte by byte, and "." after "-":
		// a linguistic collation would put "bolt-m6" and "PO-a" first.
		exec(t, db, `INSERT INTO purchase_orders VALUES ('PO-2',1,'NUT-M8',200,325,'SUP-07'), ('PO-1',2,'NUT-M8',10,325,'SUP-07'),
			('PO-1',1,'BOLT-M8-50',200,1200,'SUP-07'), ('PO-3',1,'NUT-M8',5,325,'SUP-07'), ('PO-a',1,'bolt-m6',1,5000000000,'SUP-01'),
			('PO.1',1,'NUT-M8',7,325,'SUP-07')`)
		exec(t, db, `INSERT INTO stock_received VALUES ('ldh','2026-10-13','PO-1',2,'NUT-M8',10), ('ldh','2026-10-13','PO-1',1,'BOLT-M8-50',180),
			('ldh','2026-10-13','PO-a',1,'bolt-m6',1), ('ldh','2026-10-14','PO-2',1,'NUT-M8',200), ('del','2026-10-13','PO-3',1,'NUT-M8',5)`)
		exec(t, db, `INSERT INTO stock_levels VALUES ('ldh','NUT-M8',1200,390000), ('ldh','BOLT-M8-50',10,12500), ('ldh','bolt-m6',3,15000000000),
			('ldh','BOLT.M8',4,4800), ('del','NUT-M8',1,325)`)
		// A second open keeps what is there.
		openERP(t, dsn).Close()

		pos, err := LoadPurchaseOrders(ctx, db.SQL(), []string{"PO-a", "PO.1", "PO-1", "PO-2", "PO-9"})
		if err != nil {
			t.Fatal(err)
		}
		wantPOs := []PurchaseOrderLine{
			{PO: "PO-1", Line: 1, SKU: "BOLT-M8-50", Qty: 200, UnitPaise: 1200, SupplierID: "SUP-07"},
			{PO: "PO-1", Line: 2, SKU: "NUT-M8", Qty: 10, UnitPaise: 325, SupplierID: "SUP-07"},
			{PO: "PO-2", Line: 1, SKU: "NUT-M8", Qty: 200, UnitPaise: 325, SupplierID: "SUP-07"},
			{PO: "PO-a", Line: 1, SKU: "bolt-m6", Qty: 1, UnitPaise: 5000000000, SupplierID: "SUP-01"},
			{PO: "PO.1", Line: 1, SKU: "NUT-M8", Qty: 7, UnitPaise: 325, SupplierID: "SUP-07"},
		}
		if !slices.Equal(pos, wantPOs) {
			t.Fatalf("purchase orders = %+v, want %+v", pos, wantPOs)
		}
		for _, asked := range [][]string{nil, {}, {"PO-9"}} {
			if none, err := LoadPurchaseOrders(ctx, db.SQL(), asked); err != nil || len(none) != 0 {
				t.Fatalf("purchase orders %q: %+v, %v", asked, none, err)
			}
		}

		recv, err := LoadReceipts(ctx, db.SQL(), "ldh", "2026-10-13")
		if err != nil {
			t.Fatal(err)
		}
		wantRecv := []Receipt{{PO: "PO-1", Line: 1, SKU: "BOLT-M8-50", Qty: 180}, {PO: "PO-1", Line: 2, SKU: "NUT-M8", Qty: 10},
			{PO: "PO-a", Line: 1, SKU: "bolt-m6", Qty: 1}}
		if !slices.Equal(recv, wantRecv) {
			t.Fatalf("receipts = %+v, want %+v", recv, wantRecv)
		}
		if none, err := LoadReceipts(ctx, db.SQL(), "ldh", "2026-10-12"); err != nil || len(none) != 0 {
			t.Fatalf("receipts of a day without any: %+v, %v", none, err)
		}

		levels, err := LoadStockLevels(ctx, db.SQL(), "ldh", []string{"NUT-M8", "bolt-m6", "BOLT-M8-50", "BOLT.M8", "WASHER-M8"})
		if err != nil {
			t.Fatal(err)
		}
		wantLevels := []StockLevel{{SKU: "BOLT-M8-50", Qty: 10, ValuePaise: 12500}, {SKU: "BOLT.M8", Qty: 4, ValuePaise: 4800},
			{SKU: "NUT-M8", Qty: 1200, ValuePaise: 390000}, {SKU: "bolt-m6", Qty: 3, ValuePaise: 15000000000}}
		if !slices.Equal(levels, wantLevels) {
			t.Fatalf("stock levels = %+v, want %+v", levels, wantLevels)
		}
		if none, err := LoadStockLevels(ctx, db.SQL(), "ldh", nil); err != nil || len(none) != 0 {
			t.Fatalf("no stock levels asked: %+v, %v", none, err)
		}
	})
}

// A list is one parameter: longer than SQLite's and PostgreSQL's limits on parameters.
func TestERPLoadsLongLists(t *testing.T) {
	forEachERP(t, func(t *testing.T, dsn string) {
		ctx := t.Context()
		db := openERP(t, dsn)
		exec(t, db, `INSERT INTO purchase_orders VALUES ('PO-00007',1,'NUT-M8',1,325,'SUP-07'), ('PO-69999',1,'NUT-M8',2,325,'SUP-07')`)
		exec(t, db, `INSERT INTO stock_levels VALUES ('ldh','SKU-00007',1,1), ('ldh','SKU-69999',2,2)`)
		const n = 70_000
		pos, skus := make([]string, n), make([]string, n)
		for i := range n {
			pos[i], skus[i] = fmt.Sprintf("PO-%05d", i), fmt.Sprintf("SKU-%05d", i)
		}
		got, err := LoadPurchaseOrders(ctx, db.SQL(), pos)
		if err != nil || len(got) != 2 || got[0].PO != "PO-00007" || got[1].PO != "PO-69999" {
			t.Fatalf("purchase orders of %d asked: %+v, %v", n, got, err)
		}
		levels, err := LoadStockLevels(ctx, db.SQL(), "ldh", skus)
		if err != nil || len(levels) != 2 || levels[0].SKU != "SKU-00007" || levels[1].SKU != "SKU-69999" {
			t.Fatalf("stock levels of %d asked: %+v, %v", n, levels, err)
		}
	})
}

// reconcile reads the night back from the ERP as the night's steps do and checks it
// against the truth: every line matched, the truth's adjustments, its stock before.
func reconcile(t *testing.T, db *sql.DB, c GenConfig, truth Truth) {
	t.Helper()
	ctx := t.Context()
	docs, err := ListDocuments(c.InboxDir, c.Warehouse, c.Date)
	if err != nil {
		t.Fatal(err)
	}
	invs, _ := extractAll(t, ctx, docs)
	pos, err := LoadPurchaseOrders(ctx, db, PurchaseOrderRefs(invs))
	if err != nil {
		t.Fatal(err)
	}
	matches, unmatched := MatchLines(invs, pos)
	received, err := LoadReceipts(ctx, db, c.Warehouse, c.Date)
	if err != nil {
		t.Fatal(err)
	}
	if adjs := Compare(matches, received); len(unmatched) > 0 || !slices.Equal(adjs, truthAdjustments(truth)) {
		t.Fatalf("night %s %s does not reconcile to its truth (unmatched %v)", c.Warehouse, c.Date, unmatched)
	}
	before, err := LoadStockLevels(ctx, db, c.Warehouse, SKUs(invs))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(before, truth.StockLevelsBefore) {
		t.Fatalf("stock before = %v, want %v", before, truth.StockLevelsBefore)
	}
}

// Generate writes the ERP to the database ERPPath names, file path or DSN: the night
// reads back to its truth, a second gen of it changes nothing, another night adds to it,
// and a night whose purchase orders another holds is refused without a write.
func TestERPGenerate(t *testing.T) {
	forEachERP(t, func(t *testing.T, dsn string) {
		ctx := t.Context()
		c := withDirs(refNight(), t.TempDir())
		c.ERPPath = dsn
		truth, err := Generate(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if len(truth.Adjustments) != 40 {
			t.Fatalf("the reference night has %d adjustments, want 40", len(truth.Adjustments))
		}
		db := openERP(t, dsn).SQL()
		reconcile(t, db, c, truth)
		lines := countRows(t, db, "purchase_orders")
		if lines != truth.Report.Lines || countRows(t, db, "stock_received") != lines {
			t.Fatalf("%d purchase-order lines, %d receipts, want %d each", lines, countRows(t, db, "stock_received"), truth.Report.Lines)
		}

		again, err := Generate(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if !jsonEqual(t, again, truth) {
			t.Fatal("a second gen of the same night gave another truth")
		}
		if n := countRows(t, db, "purchase_orders"); n != lines {
			t.Fatalf("%d purchase-order lines after a second gen, want %d", n, lines)
		}

		other := withDirs(GenConfig{Warehouse: "del", Date: "2026-10-14", Invoices: 30, Mismatches: 4, Seed: 2}, t.TempDir())
		other.ERPPath = dsn
		otherTruth, err := Generate(ctx, other)
		if err != nil {
			t.Fatal(err)
		}
		reconcile(t, db, other, otherTruth)
		reconcile(t, db, c, truth)
		lines += otherTruth.Report.Lines
		if n := countRows(t, db, "purchase_orders"); n != lines {
			t.Fatalf("%d purchase-order lines, want %d: a night overwrote another's", n, lines)
		}

		taken := "PO-" + poPrefix("pnq", "2026-10-15") + "-00001"
		if _, err := db.ExecContext(ctx, erpSQLOf(db).q(`INSERT INTO stock_received VALUES ('zzz', '2026-01-01', ?, 1, 'NUT-M8', 1)`), taken); err != nil {
			t.Fatal(err)
		}
		refused := withDirs(GenConfig{Warehouse: "pnq", Date: "2026-10-15", Invoices: 5, Seed: 1}, t.TempDir())
		refused.ERPPath = dsn
		if _, err := Generate(ctx, refused); !errors.Is(err, ErrPOCollision) {
			t.Fatalf("gen of a night whose purchase orders are taken = %v, want ErrPOCollision", err)
		}
		if n := countRows(t, db, "purchase_orders"); n != lines {
			t.Fatalf("%d purchase-order lines after a refused gen, want %d", n, lines)
		}
	})
}

func TestOpenSQLite(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "erp.db")
	db, err := OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var mode string
	var fk, busy int
	if err := db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode = %q, %v", mode, err)
	}
	if err := db.QueryRowContext(ctx, `PRAGMA foreign_keys`).Scan(&fk); err != nil || fk != 1 {
		t.Fatalf("foreign_keys = %d, %v", fk, err)
	}
	if err := db.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&busy); err != nil || busy != 10000 {
		t.Fatalf("busy_timeout = %d, %v", busy, err)
	}
	for _, table := range []string{"purchase_orders", "stock_received", "stock_levels", "stock_adjustments"} {
		if n := countRows(t, db, table); n != 0 {
			t.Fatalf("%s holds %d rows in a new database", table, n)
		}
	}
}

// On PostgreSQL every integer of the ERP is 64 bits, as in SQLite.
func TestERPTablesOnPostgresAreWide(t *testing.T) {
	t.Parallel()
	db := openERP(t, pgtest.DSN(t)).SQL()
	cols := pgtest.IntegerColumns(t, db, "purchase_orders", "stock_received", "stock_levels")
	for col, typ := range cols {
		if typ != "bigint" {
			t.Errorf("%s is %s, want bigint", col, typ)
		}
	}
	if len(cols) != 7 { // line, qty, unit_price_paise; line, qty; qty, value_paise
		t.Errorf("%d integer columns, want 7", len(cols))
	}
}
