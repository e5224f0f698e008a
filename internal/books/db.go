package books

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/cairnhq/cairn/pkg/fence"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// The SQLite connection settings of DESIGN.md: WAL, a busy timeout, foreign
// keys, and write transactions that take the write lock when they begin (so
// a read inside one is never upgraded into SQLITE_BUSY).
const sqliteParams = "_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)&_txlock=immediate"

// DB is one outside database: the ledger, or the ERP database that holds the
// stock store. Both hold every table of the contract.
type DB struct {
	sql     *sql.DB
	dialect fence.Dialect
}

// Open opens a DSN "sqlite:PATH" and creates the contract's tables (and their
// shadow_ copies) where missing. PostgreSQL DSNs are not supported yet.
func Open(ctx context.Context, dsn string) (*DB, error) {
	scheme, path, ok := strings.Cut(dsn, ":")
	if !ok {
		return nil, fmt.Errorf("opening books: DSN without a scheme (want sqlite:PATH): %w", ErrUnsupportedDSN)
	}
	switch scheme {
	case "sqlite":
	case "postgres", "postgresql":
		// Name the scheme only: the rest of a postgres DSN may hold a password.
		return nil, fmt.Errorf("opening books: DSN scheme %q is not supported yet (only sqlite:PATH): %w", scheme, ErrUnsupportedDSN)
	default:
		return nil, fmt.Errorf("opening books: DSN scheme %q (want sqlite:PATH): %w", scheme, ErrUnsupportedDSN)
	}
	if err := checkSQLitePath(path); err != nil {
		return nil, fmt.Errorf("opening books %q: %w", dsn, err)
	}
	sqlDB, err := sql.Open("sqlite", "file:"+path+"?"+sqliteParams)
	if err != nil {
		return nil, fmt.Errorf("opening books %q: %w", dsn, err)
	}
	db := &DB{sql: sqlDB, dialect: fence.SQLite}
	if err := sqlDB.PingContext(ctx); err != nil {
		sqlDB.Close()
		return nil, fmt.Errorf("opening books %q: %w", dsn, err)
	}
	if err := db.createTables(ctx); err != nil {
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

func (db *DB) createTables(ctx context.Context) error {
	return db.write(ctx, func(tx *sql.Tx) error {
		for _, stmt := range schema() {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("creating tables: %w", err)
			}
		}
		return nil
	})
}

// Close closes the database.
func (db *DB) Close() error {
	return db.sql.Close()
}

// SQL returns the underlying database, for readers outside the contract
// (tests, the ERP tables others own).
func (db *DB) SQL() *sql.DB {
	return db.sql
}

// Ledger returns the ledger view; shadow selects the shadow_ tables.
func (db *DB) Ledger(shadow bool) *Ledger {
	return &Ledger{db: db, t: tablesFor(shadow)}
}

// Stock returns the stock store view; shadow selects the shadow_ tables.
func (db *DB) Stock(shadow bool) *Stock {
	return &Stock{db: db, t: tablesFor(shadow)}
}

// write runs fn in one write transaction and commits it when fn returns nil.
func (db *DB) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := db.sql.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("beginning transaction: %w", err)
	}
	defer tx.Rollback() // a no-op after Commit
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing: %w", err)
	}
	return nil
}

// q turns a query written with ? placeholders into the dialect's spelling.
func (db *DB) q(query string) string {
	return rebind(db.dialect, query)
}

func rebind(d fence.Dialect, query string) string {
	if d != fence.Postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// placeholders returns n comma-separated ? placeholders.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

func nullable(s string) sql.NullString {
	return sql.NullString{String: s, Valid: s != ""}
}
