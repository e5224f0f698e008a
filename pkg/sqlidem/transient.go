package sqlidem

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/cairnhq/cairn/pkg/retry"
)

// Transient marks err temporary ([retry.Temporary], which the step runner retries) when the
// database said the same call may succeed later: the SQLite file busy or locked,
// PostgreSQL's serialization failure, deadlock, lock timeout, shutdown, too many
// connections or lost connection, or the connection gone under the driver. A keyed write
// is safe to try again even when its commit's answer was lost: the retry finds its row
// holding the same payload and reports it already there. Other errors, nil and errors of a
// cancelled context pass unchanged.
func Transient(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || !transientCause(err) {
		return err
	}
	return retry.Temporary(err)
}

// PostgreSQL's SQLSTATE codes of errors that a later try may not meet (Appendix A of its
// manual).
const (
	pgSerializationFailure = "40001"
	pgDeadlockDetected     = "40P01"
	pgAdminShutdown        = "57P01" // pg_terminate_backend, a fast shutdown
	pgCrashShutdown        = "57P02"
	pgCannotConnectNow     = "57P03" // starting up or shutting down
	pgTooManyConnections   = "53300"
	pgLockNotAvailable     = "55P03" // lock_timeout
	pgConnectionException  = "08"    // class 08: connection exceptions
)

func transientCause(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch pg.Code {
		case pgSerializationFailure, pgDeadlockDetected, pgAdminShutdown, pgCrashShutdown,
			pgCannotConnectNow, pgTooManyConnections, pgLockNotAvailable:
			return true
		}
		return strings.HasPrefix(pg.Code, pgConnectionException) // the SQLSTATE class, not the text
	}
	var lite *sqlite.Error
	if errors.As(err, &lite) {
		switch lite.Code() & 0xff { // the primary code of an extended one (SQLITE_BUSY_SNAPSHOT ...)
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return true
		}
		return false
	}
	// The connection went away: pgx's closed connection, a request it never sent, the
	// socket's end in the middle of an answer, database/sql's lost connection.
	return errors.Is(err, pgconn.ErrConnClosed) || pgconn.SafeToRetry(err) ||
		errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}
