package books

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/cairnhq/cairn/internal/pgtest"
	"github.com/cairnhq/cairn/pkg/fence"
	"github.com/cairnhq/cairn/pkg/retry"
	"github.com/cairnhq/cairn/pkg/runner"
)

// assertRetried checks that the runner takes err for temporary (sqlidem.Transient marked
// it): an item retry, no handover.
func assertRetried(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	if !errors.Is(err, retry.ErrTemporary) || !runner.IsTemporary(err) {
		t.Errorf("%v: not temporary (the runner would hand the run over)", err)
	}
}

// A write that meets a SQLite file held by another connection's write transaction fails
// with SQLITE_BUSY once the busy timeout is out: temporary. Once the other is done, the
// retry writes.
func TestSQLiteBusyIsTemporary(t *testing.T) {
	path := filepath.Join(t.TempDir(), "books.db")
	// The books' own settings but a busy timeout of 100ms, not 10s, so the test is quick.
	sqlDB, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(100)&_pragma=foreign_keys(1)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqlDB.Close() })
	db := &DB{sql: sqlDB, dialect: fence.SQLite}
	if err := db.init(t.Context()); err != nil {
		t.Fatal(err)
	}
	other := openSQLiteAt(t, path)
	hold, err := other.SQL().Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	if _, err := hold.ExecContext(t.Context(), `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}

	e := entry("INV-1", 1, "price", 100)
	_, err = db.Ledger(false).Post(t.Context(), token(1), e)
	var lite *sqlite.Error
	if !errors.As(err, &lite) || lite.Code()&0xff != sqlite3.SQLITE_BUSY {
		t.Fatalf("Post against a held write lock: %v, want SQLITE_BUSY", err)
	}
	assertRetried(t, err)
	_, err = db.Stock(false).Apply(t.Context(), token(1), Adjustment{Key: run + ":stock:1", RunID: run, Warehouse: "ldh", SKU: "S", SupplierID: "SUP-7", QtyDelta: 1, Reason: "r", CreatedAt: at})
	assertRetried(t, err)

	if _, err := hold.ExecContext(t.Context(), `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	if inserted, err := db.Ledger(false).Post(t.Context(), token(1), e); err != nil || !inserted {
		t.Fatalf("the retry after the lock: inserted %t, %v", inserted, err)
	}
}

// A write whose backend is terminated (pg_terminate_backend, 57P01) while it waits inside
// its transaction is temporary; its retry on a new connection writes, once.
func TestPostgresTerminatedWriteIsTemporary(t *testing.T) {
	dsn := pgtest.DSN(t)
	db, admin := openDSN(t, dsn), openDSN(t, dsn)
	l := db.Ledger(false)
	e := entry("INV-1", 1, "price", 100)
	// Another transaction inserts the same key and keeps it open: Post waits on it.
	blocker, err := admin.SQL().BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback()
	if _, err := blocker.ExecContext(t.Context(), `INSERT INTO ledger_entries (key, run_id, invoice_no, line, kind, supplier_id, amount_paise, created_at)
		VALUES ($1, $2, 'X', 1, 'price', 'SUP-X', 1, $3)`, e.Key, run, at); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := l.Post(context.WithoutCancel(t.Context()), token(1), e); done <- err }()
	pgtest.Terminate(t, admin.SQL(), pgtest.LockWaiter(t, admin.SQL()))
	err = <-done
	var pg *pgconn.PgError
	if !errors.As(err, &pg) || pg.Code != "57P01" {
		t.Logf("Post of a terminated backend: %v (not a 57P01 PgError: the connection's end came first)", err)
	}
	assertRetried(t, err)
	if err := blocker.Rollback(); err != nil {
		t.Fatal(err)
	}
	if inserted, err := l.Post(t.Context(), token(1), e); err != nil || !inserted {
		t.Fatalf("the retry: inserted %t, %v", inserted, err)
	}
	if n := countRows(t, db, "ledger_entries"); n != 1 {
		t.Fatalf("%d rows, want 1", n)
	}
}

// A conflict is not temporary: no retry changes what either attempt wrote. (Which errors of
// real PostgreSQL sessions are temporary is sqlidem's, tested there.)
func TestConflictIsNotTemporary(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := b.open(t)
		e := entry("INV-a", 1, "price", 100)
		if _, err := db.Ledger(false).Post(t.Context(), token(1), e); err != nil {
			t.Fatal(err)
		}
		e.AmountPaise = 5
		if _, err := db.Ledger(false).Post(t.Context(), token(1), e); !errors.Is(err, ErrConflict) || runner.IsTemporary(err) {
			t.Fatalf("a conflict: %v, want ErrConflict, not temporary", err)
		}
	})
}
