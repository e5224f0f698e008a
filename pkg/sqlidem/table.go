package sqlidem

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/cairnhq/cairn/pkg/fence"
)

// Table is a table a job owns, written one keyed row at a time. Names are spliced into SQL:
// each must be a plain identifier (letters, digits, underscores; at most 63 bytes).
type Table struct {
	Name string // the table
	// Key is the column of the rows' idempotency keys, the table's primary key; "key"
	// when empty.
	Key string
	// Digest is the column that keeps the digest of each row's payload; "digest" when
	// empty.
	Digest string
	// Columns are the job's own columns, in the order of [Row.Values].
	Columns []Column
	// Fences is the database's fences table (package fence); "fences" when empty.
	Fences string
}

// Column is one of the job's columns: its name, and its SQL type and constraints as
// SQLite spells them ("TEXT NOT NULL", "INTEGER NOT NULL"), which [Store.Create] uses. On
// PostgreSQL every INTEGER is a BIGINT, as wide as SQLite's.
type Column struct {
	Name, Type string
}

// withDefaults fills the names left empty.
func (t Table) withDefaults() Table {
	t.Key = cmp.Or(t.Key, "key")
	t.Digest = cmp.Or(t.Digest, "digest")
	t.Fences = cmp.Or(t.Fences, "fences")
	return t
}

// validate says what is wrong with t (its defaults filled), one sentence per rule.
func (t Table) validate() error {
	seen := map[string]bool{}
	names := []string{t.Name, t.Key, t.Digest}
	for _, c := range t.Columns {
		names = append(names, c.Name)
	}
	for i, name := range names {
		if !identifier(name) {
			return fmt.Errorf("table %q: %q is not a plain SQL identifier: %w", t.Name, name, ErrInvalid)
		}
		if i > 0 && seen[strings.ToLower(name)] {
			return fmt.Errorf("table %q: column %q is named twice: %w", t.Name, name, ErrInvalid)
		}
		if i > 0 {
			seen[strings.ToLower(name)] = true
		}
	}
	switch {
	case !identifier(t.Fences):
		return fmt.Errorf("table %q: fences table %q is not a plain SQL identifier: %w", t.Name, t.Fences, ErrInvalid)
	case strings.EqualFold(t.Fences, t.Name):
		return fmt.Errorf("table %q is the fences table: %w", t.Name, ErrInvalid)
	}
	return nil
}

// identifier admits plain SQL identifiers only, as package fence does.
func identifier(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i, r := range s {
		if !(r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (i > 0 && r >= '0' && r <= '9')) {
			return false
		}
	}
	return true
}

// Store is a [Table] in one database: keyed, fenced writes of its rows, and reads of them.
// It holds no connection of its own; it is safe for concurrent use.
type Store struct {
	db *sql.DB
	d  fence.Dialect
	t  Table

	insert, digest, get, list, remove string // the queries, in d's spelling
}

// New is the store of t in db, a database that speaks d: a SQLite database opened with
// modernc.org/sqlite's "sqlite" driver, or a PostgreSQL one opened with pgx's database/sql
// driver. It checks t's names and touches nothing in db.
func New(db *sql.DB, d fence.Dialect, t Table) (*Store, error) {
	t = t.withDefaults()
	if err := t.validate(); err != nil {
		return nil, err
	}
	cols := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		cols[i] = c.Name
	}
	rest := strings.Join(cols, ", ")
	if rest != "" {
		rest = ", " + rest
	}
	keyOrder := t.Key
	if d == fence.Postgres {
		// SQLite compares text byte by byte; PostgreSQL would use the database's collation.
		keyOrder += ` COLLATE "C"`
	}
	s := &Store{db: db, d: d, t: t}
	s.insert = d.Rebind(`INSERT INTO ` + t.Name + `(` + t.Key + `, ` + t.Digest + rest + `) VALUES (` +
		strings.TrimSuffix(strings.Repeat("?, ", len(cols)+2), ", ") + `) ON CONFLICT(` + t.Key + `) DO NOTHING`)
	s.digest = d.Rebind(`SELECT ` + t.Digest + ` FROM ` + t.Name + ` WHERE ` + t.Key + ` = ?`)
	s.remove = d.Rebind(`DELETE FROM ` + t.Name + ` WHERE ` + t.Key + ` = ?`)
	s.get = d.Rebind(`SELECT ` + t.Digest + rest + ` FROM ` + t.Name + ` WHERE ` + t.Key + ` = ?`)
	s.list = d.Rebind(`SELECT ` + t.Key + `, ` + t.Digest + rest + ` FROM ` + t.Name +
		` WHERE ` + keyOrder + ` >= ? AND ` + keyOrder + ` < ? ORDER BY ` + keyOrder)
	return s, nil
}

// Table is the store's table, its defaults filled.
func (s *Store) Table() Table { return s.t }

// Create creates the table and the fences table where missing, in one transaction:
//
//	<Name>(<Key> TEXT PRIMARY KEY, <Digest> TEXT NOT NULL, <Columns>...)
//	<Fences>(run_id TEXT PRIMARY KEY, epoch TEXT NOT NULL, token INTEGER NOT NULL)
//
// A job whose table exists already (with these columns) need not call it.
func (s *Store) Create(ctx context.Context) error {
	defs := []string{s.t.Key + " TEXT PRIMARY KEY", s.t.Digest + " TEXT NOT NULL"}
	for _, c := range s.t.Columns {
		if strings.TrimSpace(c.Type) == "" {
			return fmt.Errorf("creating table %s: column %q has no type: %w", s.t.Name, c.Name, ErrInvalid)
		}
		defs = append(defs, c.Name+" "+c.Type)
	}
	stmts := []string{
		`CREATE TABLE IF NOT EXISTS ` + s.t.Name + `(` + strings.Join(defs, ", ") + `)`,
		strings.Replace(fence.Schema, "fences(", s.t.Fences+"(", 1),
	}
	err := Write(ctx, s.db, s.d, func(tx *sql.Tx) error {
		if s.d == fence.Postgres {
			// Two processes creating the same table at once can collide in PostgreSQL's
			// catalogue even with IF NOT EXISTS: they take turns.
			if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, schemaLockKey); err != nil {
				return fmt.Errorf("locking the schema: %w", err)
			}
		}
		for _, stmt := range stmts {
			if s.d == fence.Postgres {
				stmt = strings.ReplaceAll(stmt, "INTEGER", "BIGINT")
			}
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("creating table %s: %w", s.t.Name, err)
	}
	return nil
}

// schemaLockKey is the PostgreSQL advisory lock held while tables are created ("cairn" in
// ASCII, the key internal/books takes too).
const schemaLockKey int64 = 0x636169726e

// RaiseFence raises the run's fence in the fences table to tok, outside any write: call it
// right after taking the run's lease (package fence, "Who calls Hold, and when"). A
// higher token there is fence.ErrFenced, another epoch fence.ErrForeignEpoch.
func (s *Store) RaiseFence(ctx context.Context, tok fence.Token) error {
	if err := fence.Hold(ctx, s.db, s.d, s.t.Fences, tok); err != nil {
		return Transient(fmt.Errorf("raising the fence of %s: %w", s.t.Name, err))
	}
	return nil
}
