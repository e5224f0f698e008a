package pgtest

import (
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/cairnhq/cairn/internal/eventually"
)

// LockWaiter returns the pid of a backend of db's database, other than db's own, that waits
// for a lock: the session a test made wait on a row it holds. pg_stat_activity tells no one,
// so it is read again until one waits, for up to a minute.
func LockWaiter(t testing.TB, db *sql.DB) int {
	t.Helper()
	var pid int
	eventually.That(t, time.Minute, "a backend waiting for a lock", func() error {
		err := db.QueryRowContext(t.Context(), `SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND wait_event_type = 'Lock' LIMIT 1`).Scan(&pid)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			t.Fatal(err)
		}
		return err
	})
	return pid
}

// Terminate ends backend pid (pg_terminate_backend): its session's statement fails with
// 57P01, as when an administrator or a failover ends it.
func Terminate(t testing.TB, db *sql.DB, pid int) {
	t.Helper()
	var ok bool
	if err := db.QueryRowContext(t.Context(), `SELECT pg_terminate_backend($1)`, pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend(%d): %t, %v", pid, ok, err)
	}
}
