package books

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/cairnhq/cairn/internal/pgtest"
	"github.com/cairnhq/cairn/pkg/fence"
)

const (
	run   = "run-2026-10-13-ldh"
	epoch = "e7f3c1d2"
	at    = "2026-10-13T22:10:00Z"
)

func token(v uint64) fence.Token {
	return fence.Token{RunID: run, Epoch: epoch, Value: v}
}

// backend is one implementation of the contract: every contract, race and open test runs
// against each. PostgreSQL is a real server (internal/pgtest), skipped only where none can
// be had and CI is unset.
type backend struct {
	name string
	// dsn returns the DSN of a new, empty database that lives as long as t.
	dsn func(t *testing.T) string
}

var backends = []backend{
	{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "books.db") }},
	{"postgres", func(t *testing.T) string { return pgtest.DSN(t) }},
}

// open opens a new, empty database of the backend, closed in t.Cleanup.
func (b backend) open(t *testing.T) *DB {
	t.Helper()
	return openDSN(t, b.dsn(t))
}

// forEachBackend runs test as a parallel subtest per backend.
func forEachBackend(t *testing.T, test func(t *testing.T, b backend)) {
	t.Helper()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			test(t, b)
		})
	}
}

// openDSN opens dsn, closed in t.Cleanup. Errors, not the DSN, are printed: a postgres DSN
// holds a password.
func openDSN(t *testing.T, dsn string) *DB {
	t.Helper()
	db, err := Open(t.Context(), dsn)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("closing: %v", err)
		}
	})
	return db
}

func openSQLiteAt(t *testing.T, path string) *DB {
	t.Helper()
	return openDSN(t, "sqlite:"+path)
}

func entry(invoice string, line int, kind string, amount int64) Entry {
	return Entry{
		Key:         fmt.Sprintf("%s:%s:%d:%s", run, invoice, line, kind),
		RunID:       run,
		InvoiceNo:   invoice,
		Line:        line,
		Kind:        kind,
		SupplierID:  "SUP-7",
		AmountPaise: amount,
		CreatedAt:   at,
	}
}

func reversal(e Entry) Entry {
	r := e
	r.Key = e.Key + ":rev"
	r.AmountPaise = -e.AmountPaise
	r.Reverses = e.Key
	return r
}

func countRows(t *testing.T, db *DB, table string) int {
	t.Helper()
	var n int
	if err := db.SQL().QueryRowContext(t.Context(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatalf("counting %s: %v", table, err)
	}
	return n
}

func TestOpenRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		dsn      string
		mentions string // the error must say this
		hides    string // and must not say this
	}{
		{dsn: "mysql://x", mentions: `"mysql"`},
		{dsn: "ledger.db", mentions: "sqlite:PATH"},
		{dsn: "sqlite:", mentions: "empty path"},
		{dsn: "sqlite::memory:", mentions: ":memory:"},
		{dsn: "sqlite:/tmp/a.db?mode=ro", mentions: "?"},
		{dsn: "postgres:ledger", mentions: "postgres://USER"},
		{dsn: "postgres://cairn:s3cret@db:port/ledger", mentions: "must be a URL", hides: "s3cret"},
		{dsn: "postgresql://cairn:s3cret@db/ledger?sslmode=sometimes", mentions: "sslmode", hides: "s3cret"},
	}
	for _, tt := range tests {
		t.Run(tt.dsn, func(t *testing.T) {
			t.Parallel()
			db, err := Open(t.Context(), tt.dsn)
			if err == nil {
				db.Close()
				t.Fatalf("Open(%q) succeeded", tt.dsn)
			}
			if !errors.Is(err, ErrUnsupportedDSN) {
				t.Errorf("Open(%q) = %v, want ErrUnsupportedDSN", tt.dsn, err)
			}
			if !strings.Contains(err.Error(), tt.mentions) {
				t.Errorf("Open(%q) = %v, want it to mention %s", tt.dsn, err, tt.mentions)
			}
			if tt.hides != "" && strings.Contains(err.Error(), tt.hides) {
				t.Errorf("Open(%q) = %v leaks %q", tt.dsn, err, tt.hides)
			}
		})
	}
}

// A server that cannot be reached is named, its password is not.
func TestOpenPostgresUnreachable(t *testing.T) {
	t.Parallel()
	db, err := Open(t.Context(), "postgres://cairn:s3cret@127.0.0.1:1/ledger?connect_timeout=10")
	if err == nil {
		db.Close()
		t.Fatal("Open of a closed port succeeded")
	}
	if errors.Is(err, ErrUnsupportedDSN) {
		t.Errorf("Open = %v: a DSN that parses is supported", err)
	}
	if !strings.Contains(err.Error(), "127.0.0.1") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("Open = %v, want it to name 127.0.0.1 and not the password", err)
	}
}

func TestOpenCreatesTablesAndSettings(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "erp.db")
	db := openSQLiteAt(t, path)
	ctx := t.Context()

	for _, name := range []string{
		"ledger_entries", "stock_adjustments", "stock_levels", "fences",
		"shadow_ledger_entries", "shadow_stock_adjustments", "shadow_stock_levels", "shadow_fences",
	} {
		var got string
		err := db.SQL().QueryRowContext(ctx, "SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?", name).Scan(&got)
		if err != nil {
			t.Errorf("table %s: %v", name, err)
		}
	}
	var mode string
	if err := db.SQL().QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode = %q (%v), want wal", mode, err)
	}
	var fk, busy int
	if err := db.SQL().QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk); err != nil || fk != 1 {
		t.Errorf("foreign_keys = %d (%v), want 1", fk, err)
	}
	if err := db.SQL().QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy); err != nil || busy < 1000 {
		t.Errorf("busy_timeout = %d (%v), want at least 1000", busy, err)
	}

	// Opening again over existing tables (a second process, a restart) is fine.
	again := openSQLiteAt(t, path)
	if _, err := again.Ledger(false).Post(ctx, token(1), entry("INV-1", 1, "price", 100)); err != nil {
		t.Fatalf("posting through a second Open: %v", err)
	}
	if n := countRows(t, db, "ledger_entries"); n != 1 {
		t.Fatalf("first handle sees %d rows, want 1", n)
	}
}

func TestOpenPostgres(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	// Processes that start together open a fresh database at once: each creates the
	// tables, none fails.
	const opens = 4
	dbs := make([]*DB, opens)
	errs := make([]error, opens)
	var wg sync.WaitGroup
	for i := range opens {
		wg.Go(func() { dbs[i], errs[i] = Open(t.Context(), dsn) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("concurrent Open %d: %v", i, err)
			continue
		}
		t.Cleanup(func() { dbs[i].Close() })
	}
	if t.Failed() {
		t.FailNow()
	}
	db := dbs[0]
	ctx := t.Context()
	for _, name := range []string{
		"ledger_entries", "stock_adjustments", "stock_levels", "fences",
		"shadow_ledger_entries", "shadow_stock_adjustments", "shadow_stock_levels", "shadow_fences",
	} {
		var found bool
		if err := db.SQL().QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&found); err != nil || !found {
			t.Errorf("table %s: %v, %v", name, found, err)
		}
	}
	// Every integer of the contract is 64 bits, as in SQLite.
	cols := pgtest.IntegerColumns(t, db.SQL())
	for col, typ := range cols {
		if typ != "bigint" {
			t.Errorf("%s is %s, want bigint", col, typ)
		}
	}
	if len(cols) != 2*7 { // line, amount_paise; qty_delta, value_delta_paise; qty, value_paise; token; and the shadows
		t.Errorf("%d integer columns, want 14", len(cols))
	}
}

func TestOpenKeepsOthersTables(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		dsn := b.dsn(t)
		db := openDSN(t, dsn)
		ctx := t.Context()
		// The ERP generator owns purchase_orders and may create stock_levels first.
		if _, err := db.SQL().ExecContext(ctx, `CREATE TABLE purchase_orders(po TEXT, line INTEGER)`); err != nil {
			t.Fatal(err)
		}
		if _, err := db.SQL().ExecContext(ctx, `INSERT INTO stock_levels VALUES ('ldh', 'NUT-M8', 1200, 390000)`); err != nil {
			t.Fatal(err)
		}
		db.Close()
		db = openDSN(t, dsn)
		if n := countRows(t, db, "purchase_orders"); n != 0 {
			t.Fatalf("purchase_orders has %d rows", n)
		}
		if n := countRows(t, db, "stock_levels"); n != 1 {
			t.Fatalf("stock_levels has %d rows after reopening, want 1", n)
		}
	})
}

func TestFencesTableIsTheFenceSchema(t *testing.T) {
	t.Parallel()
	for d, want := range map[fence.Dialect]string{
		fence.SQLite:   fence.Schema,
		fence.Postgres: strings.Replace(fence.Schema, "token INTEGER", "token BIGINT", 1),
	} {
		if !strings.Contains(strings.Join(schema(d), "\n"), want) {
			t.Errorf("%s: books does not create fences as %q", d, want)
		}
	}
}

// isForeignKeyViolation tells each backend's foreign key error.
func isForeignKeyViolation(err error) bool {
	var se *sqlite.Error
	var pe *pgconn.PgError
	return (errors.As(err, &se) && se.Code() == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY) ||
		(errors.As(err, &pe) && pe.Code == "23503")
}

// The foreign keys of the contract hold even for a writer that skips Post.
func TestForeignKeyEnforced(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := b.open(t)
		for _, table := range []string{"ledger_entries", "shadow_ledger_entries"} {
			_, err := db.SQL().ExecContext(t.Context(), db.q(`INSERT INTO `+table+
				`(key, run_id, invoice_no, line, kind, supplier_id, amount_paise, reverses, created_at)
				VALUES ('k:rev', 'r', 'i', 1, 'price', 's', -5, 'k', ?)`), at)
			if !isForeignKeyViolation(err) {
				t.Errorf("insert into %s reversing a missing key = %v, want a foreign key error", table, err)
			}
		}
		for _, table := range []string{"stock_adjustments", "shadow_stock_adjustments"} {
			_, err := db.SQL().ExecContext(t.Context(), db.q(`INSERT INTO `+table+
				`(key, run_id, warehouse, sku, supplier_id, qty_delta, value_delta_paise, reason, reverses, created_at)
				VALUES ('k:rev', 'r', 'w', 's', 'p', 1, 1, 'x', 'k', ?)`), at)
			if !isForeignKeyViolation(err) {
				t.Errorf("insert into %s reversing a missing key = %v, want a foreign key error", table, err)
			}
		}
	})
}

func TestContextCancelled(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := b.open(t)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, err := db.Ledger(false).Post(ctx, token(1), entry("INV-1", 1, "price", 100)); !errors.Is(err, context.Canceled) {
			t.Fatalf("Post on a cancelled context = %v, want context.Canceled", err)
		}
		if n := countRows(t, db, "ledger_entries"); n != 0 {
			t.Fatalf("%d rows after a cancelled Post", n)
		}
	})
}
