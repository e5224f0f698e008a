package sqlidem

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/cairnhq/cairn/pkg/fence"
	"github.com/cairnhq/cairn/pkg/idempotency"
)

// Row is one row of a job's table.
type Row struct {
	// Key is the row's idempotency key, built from ids only: "<run>:...", the run of the
	// token it is written under.
	Key string
	// Payload is the bytes that stand for what the row says (the job's own encoding of
	// it, times and attempt numbers left out): the same key written again with the same
	// payload is a repeat, with another a conflict. Its digest is kept beside the row.
	Payload []byte
	// Values are the job's columns, in the order of [Table.Columns].
	Values []any
}

// Digest is the digest kept for r: [idempotency.Digest] of its payload.
func (r Row) Digest() string { return idempotency.Digest(r.Payload) }

// Write runs fn in one write transaction of db, a database that speaks d, and commits it
// when fn returns nil; fn's error, and any of beginning or committing, comes back through
// [Transient]. On PostgreSQL the transaction runs under READ COMMITTED, said rather than
// assumed: there the fence's row lock queues the writes of one run, and an insert that meets
// a key committed meanwhile does nothing and reads that row back, so no serialization
// failure is needed to keep two writers apart.
func Write(ctx context.Context, db *sql.DB, d fence.Dialect, fn func(tx *sql.Tx) error) error {
	var opts *sql.TxOptions
	if d == fence.Postgres {
		opts = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	}
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return Transient(fmt.Errorf("beginning transaction: %w", err))
	}
	defer tx.Rollback() // a no-op after Commit
	if err := fn(tx); err != nil {
		return Transient(err)
	}
	if err := tx.Commit(); err != nil {
		// The commit's answer may be lost with the connection: a retry finds the keyed
		// rows there with the same payload, so a lost connection is temporary here too.
		return Transient(fmt.Errorf("committing: %w", err))
	}
	return nil
}

// Put writes r under tok in one transaction: the fence check, then the insert. It returns
// true when r was inserted, false when its key already held the same payload (nothing
// changes). A key holding another payload is an [idempotency.ConflictError] naming the key
// and both digests (errors.Is idempotency.ErrConflict); a fence held by a higher token is
// fence.ErrFenced, another epoch fence.ErrForeignEpoch; a key outside tok's run, a row
// without its payload, or values that do not match the columns, [ErrInvalid]. None of them
// writes anything. The database's transient errors are temporary ([Transient]).
func (s *Store) Put(ctx context.Context, tok fence.Token, r Row) (inserted bool, err error) {
	if err := s.check(tok, r); err != nil {
		return false, fmt.Errorf("writing %s row %q: %w", s.t.Name, r.Key, err)
	}
	err = Write(ctx, s.db, s.d, func(tx *sql.Tx) error {
		inserted, err = s.insertRow(ctx, tx, tok, r)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("writing %s row %q: %w", s.t.Name, r.Key, err)
	}
	return inserted, nil
}

// Insert is [Store.Put] inside tx, a transaction of [Write]'s (or of the job's own, which
// should run as Write's does): the fence check and the keyed insert, committed with
// whatever else the job does in tx, or not at all. Act on inserted to change other rows
// only once.
func (s *Store) Insert(ctx context.Context, tx *sql.Tx, tok fence.Token, r Row) (inserted bool, err error) {
	if err := s.check(tok, r); err != nil {
		return false, fmt.Errorf("writing %s row %q: %w", s.t.Name, r.Key, err)
	}
	inserted, err = s.insertRow(ctx, tx, tok, r)
	if err != nil {
		return false, fmt.Errorf("writing %s row %q: %w", s.t.Name, r.Key, Transient(err))
	}
	return inserted, nil
}

func (s *Store) check(tok fence.Token, r Row) error {
	switch {
	case tok.RunID == "":
		return fmt.Errorf("a token without a run: %w", ErrInvalid)
	case !strings.HasPrefix(r.Key, tok.RunID+":"):
		// The run's fence guards the run's rows only.
		return fmt.Errorf("key outside run %q (want %q...): %w", tok.RunID, tok.RunID+":", ErrInvalid)
	case r.Payload == nil:
		return fmt.Errorf("no payload: %w", ErrInvalid)
	case len(r.Values) != len(s.t.Columns):
		return fmt.Errorf("%d values for %d columns: %w", len(r.Values), len(s.t.Columns), ErrInvalid)
	}
	return nil
}

func (s *Store) insertRow(ctx context.Context, tx *sql.Tx, tok fence.Token, r Row) (bool, error) {
	if err := fence.Hold(ctx, tx, s.d, s.t.Fences, tok); err != nil {
		return false, err
	}
	fresh := r.Digest()
	args := append([]any{r.Key, fresh}, r.Values...)
	res, err := tx.ExecContext(ctx, s.insert, args...)
	if err != nil {
		return false, fmt.Errorf("inserting: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("inserting: %w", err)
	}
	if n == 1 {
		return true, nil
	}
	var stored string
	err = tx.QueryRowContext(ctx, s.digest, r.Key).Scan(&stored)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, errors.New("key neither inserted nor found")
	case err != nil:
		return false, fmt.Errorf("reading the stored digest: %w", err)
	case stored != fresh:
		return false, idempotency.Conflict(r.Key, stored, fresh)
	}
	return false, nil
}

// Remove deletes the row of key under tok in one transaction, the fence checked first, as
// an undo takes back what a step wrote: tok is the undo's token, which the fence holds from
// then on, so a step's writer of an older token cannot write the row again. It returns true
// when a row was deleted, false when none was there (never written, or removed already):
// safe to repeat. A fence held by a higher token is fence.ErrFenced; a key outside tok's run
// is [ErrInvalid]; the database's transient errors are temporary ([Transient]).
func (s *Store) Remove(ctx context.Context, tok fence.Token, key string) (removed bool, err error) {
	if tok.RunID == "" || !strings.HasPrefix(key, tok.RunID+":") {
		return false, fmt.Errorf("removing %s row %q: key outside run %q: %w", s.t.Name, key, tok.RunID, ErrInvalid)
	}
	err = Write(ctx, s.db, s.d, func(tx *sql.Tx) error {
		if err := fence.Hold(ctx, tx, s.d, s.t.Fences, tok); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, s.remove, key)
		if err != nil {
			return fmt.Errorf("deleting: %w", err)
		}
		n, err := res.RowsAffected()
		removed = n == 1
		return err
	})
	if err != nil {
		return false, fmt.Errorf("removing %s row %q: %w", s.t.Name, key, err)
	}
	return removed, nil
}
