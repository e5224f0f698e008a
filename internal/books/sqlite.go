package books

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/cairnhq/cairn/pkg/fence"
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
	sqlDB, err := sql.Open("sqlite", "file:"+path+"?"+sqliteParams)
	if err != nil {
		return nil, fmt.Errorf("opening books %q: %w", dsn, err)
	}
	db := &DB{sql: sqlDB, dialect: fence.SQLite}
	if err := db.init(ctx); err != nil {
		sqlDB.Close()
		return nil, fmt.Errorf("opening books %q: %w", dsn, err)
	}
	return db, nil
}

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
