package books

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/cairnhq/cairn/internal/sqlitefile"
	"github.com/cairnhq/cairn/pkg/fence"
	"github.com/cairnhq/cairn/pkg/retry"
	"github.com/cairnhq/cairn/pkg/sqlidem"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// The SQLite connection settings of DESIGN.md: WAL, a busy timeout, foreign
// keys, and write transactions that take the write lock when they begin (so
// a read inside one is never upgraded into SQLITE_BUSY).
const sqliteParams = "_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)&_txlock=immediate"

// openSQLiteFile opens the "sqlite:PATH" DSN dsn.
func openSQLiteFile(ctx context.Context, dsn, path string) (*DB, error) {
	if err := checkSQLitePath(path); err != nil {
		return nil, fmt.Errorf("opening books %q: %w", dsn, err)
	}
	if err := sqlitefile.Private(path); err != nil {
		return nil, fmt.Errorf("opening books %q: %w", dsn, err)
	}
	sqlDB, err := sql.Open("sqlite", "file:"+path+"?"+sqliteParams)
	if err != nil {
		return nil, fmt.Errorf("opening books %q: %w", dsn, err)
	}
	db := &DB{sql: sqlDB, dialect: fence.SQLite}
	// The first connection turns a fresh file to WAL, which needs the file to
	// itself: when several services open it at once, SQLite answers the others
	// SQLITE_BUSY at once, without waiting out the busy timeout (two readers
	// each wanting to write would deadlock). They try again until it is done.
	err = openRetry.Do(ctx, func(err error) bool { return retry.IsTemporary(sqlidem.Transient(err)) }, func(int) error {
		return db.init(ctx)
	})
	if err != nil {
		sqlDB.Close()
		return nil, fmt.Errorf("opening books %q: %w", dsn, err)
	}
	return db, nil
}

// openRetry is how long Open waits out other services' opening of the same
// file: as long as the busy timeout.
var openRetry = retry.Policy{First: 5 * time.Millisecond, Max: 250 * time.Millisecond, Jitter: 0.5, Within: 10 * time.Second}

func checkSQLitePath(path string) error {
	switch {
	case path == "":
		return fmt.Errorf("empty path: %w", ErrUnsupportedDSN)
	case path == ":memory:" || strings.HasPrefix(path, "file:"):
		// An in-memory database is one per connection, not one store.
		return fmt.Errorf("path %q is not a file path: %w", path, ErrUnsupportedDSN)
	case strings.ContainsAny(path, "?#"):
		return fmt.Errorf("path %q holds ? or #: %w", path, ErrUnsupportedDSN)
	}
	return nil
}
