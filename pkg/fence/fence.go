package fence

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Schema creates the fences table. Another table of the same columns (such as
// shadow_fences) is made by changing the name.
const Schema = `CREATE TABLE IF NOT EXISTS fences(run_id TEXT PRIMARY KEY, epoch TEXT NOT NULL, token INTEGER NOT NULL)`

// Dialect selects the SQL spelling of a database.
type Dialect int

const (
	// SQLite spells the larger of two values max(a, b) and placeholders ?.
	SQLite Dialect = iota
	// Postgres spells it GREATEST(a, b) and placeholders $1, $2, ...
	Postgres
)

// String names the dialect.
func (d Dialect) String() string {
	switch d {
	case SQLite:
		return "sqlite"
	case Postgres:
		return "postgres"
	default:
		return "dialect(" + strconv.Itoa(int(d)) + ")"
	}
}

func (d Dialect) greatest() string {
	if d == Postgres {
		return "GREATEST"
	}
	return "max"
}

// Rebind turns a query written with ? placeholders into d's spelling: $1, $2, ... on
// PostgreSQL. Every ? is a placeholder, even one inside a string literal.
func (d Dialect) Rebind(query string) string {
	if d != Postgres {
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

// placeholders returns the first three positional parameters.
func (d Dialect) placeholders() (string, string, string) {
	if d == Postgres {
		return "$1", "$2", "$3"
	}
	return "?", "?", "?"
}

// Token is the lease token of the holder: the run, the epoch of the NATS
// storage the lease was taken in, and the token value.
type Token struct {
	RunID, Epoch string
	Value        uint64
}

// Querier is satisfied by *sql.DB and *sql.Tx.
type Querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Hold raises the fence of t.RunID in table to t (or checks it, when it is
// already there). A higher token in the fence is ErrFenced, another epoch is
// ErrForeignEpoch; both errors name what the fence holds and what t holds.
// Call it on the *sql.DB right after taking a lease, and on the *sql.Tx of
// every write, before the write.
func Hold(ctx context.Context, q Querier, d Dialect, table string, t Token) error {
	query, err := holdQuery(d, table)
	if err != nil {
		return err
	}
	return upsert(ctx, q, query, "holding", table, t)
}

// Adopt moves the fence of t.RunID in table to t's epoch and token: the
// operator's `cairn fences adopt RUN`, after a person has checked the run.
// Within one epoch it never lowers the fence: a higher token already there is
// ErrFenced.
func Adopt(ctx context.Context, db *sql.DB, d Dialect, table string, t Token) error {
	query, err := adoptQuery(d, table)
	if err != nil {
		return err
	}
	return upsert(ctx, db, query, "adopting", table, t)
}

func upsert(ctx context.Context, q Querier, query, verb, table string, t Token) error {
	if err := checkToken(t); err != nil {
		return fmt.Errorf("%s fence %s for run %q: %w", verb, table, t.RunID, err)
	}
	var (
		epoch string
		token int64
	)
	if err := q.QueryRowContext(ctx, query, t.RunID, t.Epoch, int64(t.Value)).Scan(&epoch, &token); err != nil {
		return fmt.Errorf("%s fence %s for run %q: %w", verb, table, t.RunID, err)
	}
	if epoch != t.Epoch {
		return fmt.Errorf("%s fence %s for run %q: the fence holds epoch %q (token %d), ours is epoch %q (token %d): %w",
			verb, table, t.RunID, epoch, token, t.Epoch, t.Value, ErrForeignEpoch)
	}
	if token > int64(t.Value) {
		return fmt.Errorf("%s fence %s for run %q: the fence holds token %d, ours is %d: %w",
			verb, table, t.RunID, token, t.Value, ErrFenced)
	}
	return nil
}

func checkToken(t Token) error {
	switch {
	case t.RunID == "":
		return fmt.Errorf("empty run id: %w", ErrInvalidToken)
	case t.Epoch == "":
		return fmt.Errorf("empty epoch: %w", ErrInvalidToken)
	case t.Value > math.MaxInt64:
		return fmt.Errorf("token %d beyond a 64-bit SQL integer: %w", t.Value, ErrInvalidToken)
	}
	return nil
}

func holdQuery(d Dialect, table string) (string, error) {
	if err := checkTable(table); err != nil {
		return "", err
	}
	p1, p2, p3 := d.placeholders()
	return "INSERT INTO " + table + "(run_id, epoch, token) VALUES (" + p1 + ", " + p2 + ", " + p3 + ")" +
		" ON CONFLICT(run_id) DO UPDATE SET token = CASE WHEN " + table + ".epoch = excluded.epoch" +
		" THEN " + d.greatest() + "(" + table + ".token, excluded.token) ELSE " + table + ".token END" +
		" RETURNING epoch, token", nil
}

// adoptQuery moves the row to the new epoch; SET expressions read the old
// row, so the CASE sees the epoch from before the move.
func adoptQuery(d Dialect, table string) (string, error) {
	if err := checkTable(table); err != nil {
		return "", err
	}
	p1, p2, p3 := d.placeholders()
	return "INSERT INTO " + table + "(run_id, epoch, token) VALUES (" + p1 + ", " + p2 + ", " + p3 + ")" +
		" ON CONFLICT(run_id) DO UPDATE SET token = CASE WHEN " + table + ".epoch = excluded.epoch" +
		" THEN " + d.greatest() + "(" + table + ".token, excluded.token) ELSE excluded.token END," +
		" epoch = excluded.epoch" +
		" RETURNING epoch, token", nil
}

// checkTable admits plain identifiers only: the name is spliced into SQL.
func checkTable(table string) error {
	if table == "" {
		return fmt.Errorf("table %q: %w", table, ErrInvalidTable)
	}
	for i, r := range table {
		ok := r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (i > 0 && r >= '0' && r <= '9')
		if !ok {
			return fmt.Errorf("table %q: %w", table, ErrInvalidTable)
		}
	}
	if len(table) > 63 {
		return fmt.Errorf("table %q: %w", table, ErrInvalidTable)
	}
	return nil
}
