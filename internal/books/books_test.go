package books

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairnhq/cairn/pkg/fence"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

const (
	run   = "run-2026-10-13-ldh"
	epoch = "e7f3c1d2"
	at    = "2026-10-13T22:10:00Z"
)

func token(v uint64) fence.Token {
	return fence.Token{RunID: run, Epoch: epoch, Value: v}
}

// openSQLite opens a fresh SQLite file in t.TempDir(), closed in t.Cleanup.
func openSQLite(t *testing.T) *DB {
	t.Helper()
	return openSQLiteAt(t, filepath.Join(t.TempDir(), "books.db"))
}

func openSQLiteAt(t *testing.T, path string) *DB {
	t.Helper()
	db, err := Open(t.Context(), "sqlite:"+path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("closing %s: %v", path, err)
		}
	})
	return db
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
		{dsn: "postgres://cairn:s3cret@db:5432/ledger", mentions: `"postgres"`, hides: "s3cret"},
		{dsn: "postgresql://cairn:s3cret@db/ledger", mentions: `"postgresql"`, hides: "s3cret"},
		{dsn: "mysql://x", mentions: `"mysql"`},
		{dsn: "ledger.db", mentions: "sqlite:PATH"},
		{dsn: "sqlite:", mentions: "empty path"},
		{dsn: "sqlite::memory:", mentions: ":memory:"},
		{dsn: "sqlite:/tmp/a.db?mode=ro", mentions: "?"},
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

func TestOpenKeepsOthersTables(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "erp.db")
	db := openSQLiteAt(t, path)
	ctx := t.Context()
	// The ERP generator owns purchase_orders and may create stock_levels first.
	if _, err := db.SQL().ExecContext(ctx, `CREATE TABLE purchase_orders(po TEXT, line INTEGER)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SQL().ExecContext(ctx, `INSERT INTO stock_levels VALUES ('ldh', 'NUT-M8', 1200, 390000)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db = openSQLiteAt(t, path)
	if n := countRows(t, db, "purchase_orders"); n != 0 {
		t.Fatalf("purchase_orders has %d rows", n)
	}
	if n := countRows(t, db, "stock_levels"); n != 1 {
		t.Fatalf("stock_levels has %d rows after reopening, want 1", n)
	}
}

func TestFencesTableIsTheFenceSchema(t *testing.T) {
	t.Parallel()
	var found bool
	for _, stmt := range schema() {
		if stmt == fence.Schema {
			found = true
		}
	}
	if !found {
		t.Fatalf("books does not create fences with fence.Schema %q", fence.Schema)
	}
}

// The foreign keys of the contract hold even for a writer that skips Post.
func TestForeignKeyEnforced(t *testing.T) {
	t.Parallel()
	db := openSQLite(t)
	for _, table := range []string{"ledger_entries", "shadow_ledger_entries"} {
		_, err := db.SQL().ExecContext(t.Context(), `INSERT INTO `+table+
			`(key, run_id, invoice_no, line, kind, supplier_id, amount_paise, reverses, created_at)
			VALUES ('k:rev', 'r', 'i', 1, 'price', 's', -5, 'k', ?)`, at)
		var se *sqlite.Error
		if !errors.As(err, &se) || se.Code() != sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY {
			t.Errorf("insert into %s reversing a missing key = %v, want a foreign key error", table, err)
		}
	}
	for _, table := range []string{"stock_adjustments", "shadow_stock_adjustments"} {
		_, err := db.SQL().ExecContext(t.Context(), `INSERT INTO `+table+
			`(key, run_id, warehouse, sku, supplier_id, qty_delta, value_delta_paise, reason, reverses, created_at)
			VALUES ('k:rev', 'r', 'w', 's', 'p', 1, 1, 'x', 'k', ?)`, at)
		var se *sqlite.Error
		if !errors.As(err, &se) || se.Code() != sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY {
			t.Errorf("insert into %s reversing a missing key = %v, want a foreign key error", table, err)
		}
	}
}

func TestRebind(t *testing.T) {
	t.Parallel()
	q := `SELECT a FROM t WHERE b = ? AND c IN (?, ?)`
	if got := rebind(fence.SQLite, q); got != q {
		t.Errorf("sqlite rebind = %q", got)
	}
	if got, want := rebind(fence.Postgres, q), `SELECT a FROM t WHERE b = $1 AND c IN ($2, $3)`; got != want {
		t.Errorf("postgres rebind = %q, want %q", got, want)
	}
}

func TestContextCancelled(t *testing.T) {
	t.Parallel()
	db := openSQLite(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := db.Ledger(false).Post(ctx, token(1), entry("INV-1", 1, "price", 100)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Post on a cancelled context = %v, want context.Canceled", err)
	}
	if n := countRows(t, db, "ledger_entries"); n != 0 {
		t.Fatalf("%d rows after a cancelled Post", n)
	}
}
