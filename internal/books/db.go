package books

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"unicode"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/cairnhq/cairn/pkg/fence"
	"github.com/cairnhq/cairn/pkg/sqlidem"
)

// DB is one outside database: the ledger, or the ERP database that holds the
// stock store. Both hold every table of the contract.
type DB struct {
	sql     *sql.DB
	dialect fence.Dialect
}

// Open opens a DSN, "sqlite:PATH" or "postgres://..." (also "postgresql://..."), and
// creates the contract's tables (and their shadow_ copies) where missing. Errors name a
// postgres DSN without its password.
func Open(ctx context.Context, dsn string) (*DB, error) {
	scheme, path, ok := strings.Cut(dsn, ":")
	if !ok {
		return nil, fmt.Errorf("opening books: DSN without a scheme (want sqlite:PATH or postgres://...): %w", ErrUnsupportedDSN)
	}
	switch scheme {
	case "sqlite":
		return openSQLiteFile(ctx, dsn, path)
	case "postgres", "postgresql":
		return openPostgres(ctx, scheme, dsn)
	default:
		return nil, fmt.Errorf("opening books: DSN scheme %q (want sqlite:PATH or postgres://...): %w", scheme, ErrUnsupportedDSN)
	}
}

// CheckDSN reads a DSN as Open would, without opening anything: a DSN Open could never
// open is an error (ErrUnsupportedDSN) that names it without its password.
func CheckDSN(dsn string) error {
	scheme, path, ok := strings.Cut(dsn, ":")
	switch {
	case !ok:
		return fmt.Errorf("DSN without a scheme (want sqlite:PATH or postgres://...): %w", ErrUnsupportedDSN)
	case scheme == "sqlite":
		return checkSQLitePath(path)
	case scheme == "postgres" || scheme == "postgresql":
		_, _, err := parsePostgres(scheme, dsn)
		return err
	default:
		return fmt.Errorf("DSN scheme %q (want sqlite:PATH or postgres://...): %w", scheme, ErrUnsupportedDSN)
	}
}

// init checks the connection and creates the tables.
func (db *DB) init(ctx context.Context) error {
	if err := db.sql.PingContext(ctx); err != nil {
		return err
	}
	return db.createTables(ctx, schema(db.dialect))
}

// CreateTables creates tables of the systems that share the database (the ERP's own,
// next to the stock store's) as Open creates the contract's: stmts are CREATE TABLE IF
// NOT EXISTS statements in SQLite's SQL, every INTEGER is a BIGINT on PostgreSQL, and
// they run in one transaction, on PostgreSQL under the lock Open takes.
func (db *DB) CreateTables(ctx context.Context, stmts ...string) error {
	spelled := make([]string, len(stmts))
	for i, stmt := range stmts {
		spelled[i] = widen(db.dialect, stmt)
	}
	return db.createTables(ctx, spelled)
}

func (db *DB) createTables(ctx context.Context, stmts []string) error {
	return db.write(ctx, func(tx *sql.Tx) error {
		if db.dialect == fence.Postgres {
			// Two processes creating the same table at once can collide in
			// PostgreSQL's catalogue even with IF NOT EXISTS: take turns.
			if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, schemaLockKey); err != nil {
				return fmt.Errorf("locking the schema: %w", err)
			}
		}
		for _, stmt := range stmts {
			if db.dialect == fence.Postgres {
				// A service's own role may use its tables but not create any (CREATE
				// TABLE IF NOT EXISTS needs CREATE on the schema even when the table
				// exists): a table that exists is left alone.
				var exists bool
				if err := tx.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, createdTable(stmt)).Scan(&exists); err != nil {
					return fmt.Errorf("looking up a table: %w", err)
				}
				if exists {
					continue
				}
			}
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("creating tables: %w", err)
			}
		}
		return nil
	})
}

// createdTable is the table (or index) a CREATE ... IF NOT EXISTS statement creates.
func createdTable(stmt string) string {
	_, rest, _ := strings.Cut(stmt, "IF NOT EXISTS")
	rest = strings.TrimSpace(rest)
	// The name ends at the column list of a table or at the ON of an index.
	if i := strings.IndexFunc(rest, func(r rune) bool { return r == '(' || unicode.IsSpace(r) }); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// Close closes the database; a nil DB (a database not opened) is a no-op.
func (db *DB) Close() error {
	if db == nil {
		return nil
	}
	return db.sql.Close()
}

// SQL returns the underlying database, for readers outside the contract
// (tests, the ERP tables others own). Queries on it are in the database's own
// SQL: ? placeholders on SQLite, $1, $2, ... on PostgreSQL.
func (db *DB) SQL() *sql.DB {
	return db.sql
}

// Dialect returns the SQL the database speaks.
func (db *DB) Dialect() fence.Dialect {
	return db.dialect
}

// DialectOf returns the SQL spoken by a database opened through pgx's database/sql
// driver (as Open opens postgres:// DSNs): PostgreSQL; by any other: SQLite. It lets a
// reader handed only [DB.SQL] spell its queries.
func DialectOf(db *sql.DB) fence.Dialect {
	if _, ok := db.Driver().(*stdlib.Driver); ok {
		return fence.Postgres
	}
	return fence.SQLite
}

// Ledger returns the ledger view; shadow selects the shadow_ tables.
func (db *DB) Ledger(shadow bool) *Ledger {
	return &Ledger{db: db, t: tablesFor(shadow)}
}

// Stock returns the stock store view; shadow selects the shadow_ tables.
func (db *DB) Stock(shadow bool) *Stock {
	return &Stock{db: db, t: tablesFor(shadow)}
}

// write runs fn in one write transaction and commits it when fn returns nil, its errors
// classed by sqlidem.Transient (sqlidem.Write: READ COMMITTED on PostgreSQL, where the
// fence upsert's row lock queues the writes of a run).
func (db *DB) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return sqlidem.Write(ctx, db.sql, db.dialect, fn)
}

// orderByKey orders rows by key in byte order, as SQLite's BINARY collation
// does; PostgreSQL would otherwise sort by the database's collation.
func (db *DB) orderByKey() string {
	if db.dialect == fence.Postgres {
		return ` ORDER BY key COLLATE "C"`
	}
	return ` ORDER BY key`
}

// q turns a query written with ? placeholders into the dialect's spelling.
func (db *DB) q(query string) string {
	return db.dialect.Rebind(query)
}

// Rebind turns a query written with ? placeholders into d's spelling ([fence.Dialect.Rebind]).
func Rebind(d fence.Dialect, query string) string { return d.Rebind(query) }

// placeholders returns n comma-separated ? placeholders.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

func nullable(s string) sql.NullString {
	return sql.NullString{String: s, Valid: s != ""}
}
