package sqlidem

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Stored is a row as the table holds it.
type Stored struct {
	Key    string
	Digest string // the digest of the payload it was written with
	// Values are the job's columns as the driver reads them (int64, float64, bool, string,
	// []byte, time.Time or nil), in the order of [Table.Columns].
	Values []any
}

// Get reads the row under key: the digest of its payload, and its columns into dest, one
// pointer a column as [sql.Rows.Scan] takes them (none to read the digest alone). found is
// false when no row holds key. A Verify compares the digest with [Row.Digest] of the row it
// meant to write.
func (s *Store) Get(ctx context.Context, key string, dest ...any) (digest string, found bool, err error) {
	query := s.digest
	if len(dest) > 0 {
		if len(dest) != len(s.t.Columns) {
			return "", false, fmt.Errorf("reading %s row %q: %d destinations for %d columns: %w", s.t.Name, key, len(dest), len(s.t.Columns), ErrInvalid)
		}
		query = s.get
	}
	err = s.db.QueryRowContext(ctx, query, key).Scan(append([]any{&digest}, dest...)...)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "", false, nil
	case err != nil:
		return "", false, Transient(fmt.Errorf("reading %s row %q: %w", s.t.Name, key, err))
	}
	return digest, true, nil
}

// ListRun returns every row of run (the keys "<run>:..."), ordered by key byte by byte, on
// PostgreSQL too, whatever the database's collation.
func (s *Store) ListRun(ctx context.Context, run string) ([]Stored, error) {
	if run == "" {
		return nil, fmt.Errorf("listing %s rows: empty run id: %w", s.t.Name, ErrInvalid)
	}
	// The keys of run are those from "<run>:" up to "<run>;", ';' being the byte after
	// ':': a range the primary key's index answers.
	rows, err := s.db.QueryContext(ctx, s.list, run+":", run+";")
	if err != nil {
		return nil, Transient(fmt.Errorf("listing %s rows of run %q: %w", s.t.Name, run, err))
	}
	defer rows.Close()
	var out []Stored
	for rows.Next() {
		st := Stored{Values: make([]any, len(s.t.Columns))}
		dest := []any{&st.Key, &st.Digest}
		for i := range st.Values {
			dest = append(dest, &st.Values[i])
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, Transient(fmt.Errorf("listing %s rows of run %q: %w", s.t.Name, run, err))
		}
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, Transient(fmt.Errorf("listing %s rows of run %q: %w", s.t.Name, run, err))
	}
	return out, nil
}
