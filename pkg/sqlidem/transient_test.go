package sqlidem_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/cairnhq/cairn/internal/pgtest"
	"github.com/cairnhq/cairn/pkg/fence"
	"github.com/cairnhq/cairn/pkg/idempotency"
	"github.com/cairnhq/cairn/pkg/retry"
	"github.com/cairnhq/cairn/pkg/sqlidem"
)

// assertTemporary checks that err is marked temporary, which the step runner retries.
func assertTemporary(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	if !errors.Is(err, retry.ErrTemporary) {
		t.Errorf("%v: not temporary (the runner would hand the run over)", err)
	}
}

func TestTransientClasses(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return fmt.Errorf("inserting: %w", &pgconn.PgError{Code: code, Message: "m"}) }
	temporary := []error{
		pg("40001"), pg("40P01"), pg("55P03"), pg("57P01"), pg("57P02"), pg("57P03"), pg("53300"),
		pg("08006"), pg("08000"),
		driver.ErrBadConn, sql.ErrConnDone, io.EOF, io.ErrUnexpectedEOF, pgconn.ErrConnClosed,
		fmt.Errorf("committing: %w", driver.ErrBadConn),
	}
	for _, err := range temporary {
		got := sqlidem.Transient(err)
		assertTemporary(t, got)
		if !errors.Is(got, err) || got.Error() != err.Error() {
			t.Errorf("Transient(%v) = %v: the cause is lost or reads otherwise", err, got)
		}
	}
	for _, err := range []error{
		pg("42P01"), pg("23505"), pg("28P01"), errors.New("no such table"),
		idempotency.Conflict("run:k", "sha256:a", "sha256:b"), fence.ErrFenced,
		fmt.Errorf("%w: %w", context.Canceled, driver.ErrBadConn), // a stop, not a failure
	} {
		if got := sqlidem.Transient(err); got != err {
			t.Errorf("Transient(%v) = %v, want it unchanged", err, got)
		}
	}
	if sqlidem.Transient(nil) != nil {
		t.Error("Transient(nil) is not nil")
	}
}

// A write that meets a SQLite file held by another connection's write transaction fails
// with SQLITE_BUSY once the busy timeout is out: temporary, and nothing written. Once the
// other is done, the retry writes.
func TestSQLiteBusyIsTemporary(t *testing.T) {
	t.Parallel()
	// A busy timeout of 100ms, not 10s, so the test is quick.
	b := setup(t, backends[0], "_pragma=busy_timeout(100)&_pragma=journal_mode(WAL)&_txlock=immediate")
	hold, err := b.db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	if _, err := hold.ExecContext(t.Context(), `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}

	r := upload{record: "rec-0001", score: 42}.row(run + ":rec-0001")
	_, err = b.store.Put(t.Context(), token(5), r)
	var lite *sqlite.Error
	if !errors.As(err, &lite) || lite.Code()&0xff != sqlite3.SQLITE_BUSY {
		t.Fatalf("Put against a held write lock: %v, want SQLITE_BUSY", err)
	}
	assertTemporary(t, err)
	assertTemporary(t, b.store.RaiseFence(t.Context(), token(5)))

	if _, err := hold.ExecContext(t.Context(), `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	if inserted, err := b.store.Put(t.Context(), token(5), r); err != nil || !inserted {
		t.Fatalf("the retry after the lock: inserted %t, %v", inserted, err)
	}
}

// PostgreSQL's busy: a write that waits on the run's fence row, held by another
// transaction, past lock_timeout fails with 55P03: temporary, and nothing written.
func TestPostgresLockTimeoutIsTemporary(t *testing.T) {
	t.Parallel()
	b := setup(t, backends[1], "lock_timeout=100")
	blocker, err := b.db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback()
	if err := fence.Hold(t.Context(), blocker, fence.Postgres, "fences", token(5)); err != nil {
		t.Fatal(err)
	}

	r := upload{record: "rec-0001", score: 42}.row(run + ":rec-0001")
	_, err = b.store.Put(t.Context(), token(5), r)
	var pg *pgconn.PgError
	if !errors.As(err, &pg) || pg.Code != "55P03" {
		t.Fatalf("Put against a held fence row: %v, want 55P03", err)
	}
	assertTemporary(t, err)
	if err := blocker.Commit(); err != nil {
		t.Fatal(err)
	}
	if b.count(t) != 0 {
		t.Fatal("the timed-out write left its row")
	}
	if inserted, err := b.store.Put(t.Context(), token(5), r); err != nil || !inserted {
		t.Fatalf("the retry after the lock: inserted %t, %v", inserted, err)
	}
}

// Errors of real PostgreSQL sessions, each passed through Transient.
func TestPostgresTransientErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, backends[1], "")
	db, ctx := b.db, t.Context()
	keyA, keyB := run+":a", run+":b"
	for _, k := range []string{keyA, keyB} {
		b.mustPut(t, token(5), upload{record: k, score: 100}.row(k))
	}

	t.Run("serialization failure 40001", func(t *testing.T) {
		serial := &sql.TxOptions{Isolation: sql.LevelSerializable}
		tx1, err := db.BeginTx(ctx, serial)
		if err != nil {
			t.Fatal(err)
		}
		defer tx1.Rollback()
		tx2, err := db.BeginTx(ctx, serial)
		if err != nil {
			t.Fatal(err)
		}
		defer tx2.Rollback()
		// Each reads the sum, then writes what changes it: write skew, which SERIALIZABLE refuses.
		for _, tx := range []*sql.Tx{tx1, tx2} {
			var sum int64
			if err := tx.QueryRowContext(ctx, `SELECT sum(score) FROM uploads`).Scan(&sum); err != nil {
				t.Fatal(err)
			}
		}
		_, err1 := tx1.ExecContext(ctx, `UPDATE uploads SET score = 1 WHERE key = $1`, keyA)
		_, err2 := tx2.ExecContext(ctx, `UPDATE uploads SET score = 1 WHERE key = $1`, keyB)
		err = errors.Join(err1, err2)
		if err == nil {
			if err = tx1.Commit(); err == nil {
				err = tx2.Commit()
			}
		}
		var pg *pgconn.PgError
		if !errors.As(err, &pg) || pg.Code != "40001" {
			t.Fatalf("write skew under SERIALIZABLE: %v, want 40001", err)
		}
		assertTemporary(t, sqlidem.Transient(err))
	})

	t.Run("deadlock 40P01", func(t *testing.T) {
		tx1, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx1.Rollback()
		tx2, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx2.Rollback()
		lock := `SELECT key FROM uploads WHERE key = $1 FOR UPDATE`
		if _, err := tx1.ExecContext(ctx, lock, keyA); err != nil {
			t.Fatal(err)
		}
		if _, err := tx2.ExecContext(ctx, lock, keyB); err != nil {
			t.Fatal(err)
		}
		first := make(chan error, 1)
		go func() { _, err := tx1.ExecContext(ctx, lock, keyB); first <- err }()
		pgtest.LockWaiter(t, db)
		_, err2 := tx2.ExecContext(ctx, lock, keyA)
		_ = tx2.Rollback() // frees tx1 when tx2 was not the victim
		err1 := <-first
		err = firstErr(err1, err2)
		var pg *pgconn.PgError
		if !errors.As(err, &pg) || pg.Code != "40P01" {
			t.Fatalf("two transactions locking in opposite orders: %v / %v, want 40P01", err1, err2)
		}
		assertTemporary(t, sqlidem.Transient(err))
	})

	t.Run("admin shutdown 57P01 and the closed connection", func(t *testing.T) {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var pid int
		if err := c.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			t.Fatal(err)
		}
		pgtest.Terminate(t, db, pid)
		_, err = c.ExecContext(ctx, `SELECT 1`)
		t.Logf("the terminated session's next query: %v", err)
		assertTemporary(t, sqlidem.Transient(err))
		_, err = c.ExecContext(ctx, `SELECT 1`)
		t.Logf("and the one after: %v", err)
		assertTemporary(t, sqlidem.Transient(err))
	})

	t.Run("not transient", func(t *testing.T) {
		_, err := db.ExecContext(ctx, `SELECT * FROM no_such_table`)
		var pg *pgconn.PgError
		if !errors.As(err, &pg) || sqlidem.Transient(err) != err {
			t.Fatalf("an undefined table (%v) is marked temporary", err)
		}
	})
}

// firstErr is the first of errs that is not nil.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
