package books

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/cairnhq/cairn/pkg/fence"
	"github.com/cairnhq/cairn/pkg/sqlidem"
)

// Entry is a ledger_entries row.
type Entry struct {
	Key, RunID, InvoiceNo string
	Line                  int
	Kind, SupplierID      string
	AmountPaise           int64
	Reverses              string // the reversed key; "" is NULL
	// CreatedAt is RFC 3339 UTC from the caller's clock. It is not part of
	// the payload: a repeat at another time is still the same entry.
	CreatedAt string
}

// payload is every column but key and created_at, spelt for error messages and digests.
func (e Entry) payload() fields {
	return fields{
		{"run_id", fmt.Sprintf("%q", e.RunID)}, {"invoice_no", fmt.Sprintf("%q", e.InvoiceNo)},
		{"line", fmt.Sprint(e.Line)}, {"kind", fmt.Sprintf("%q", e.Kind)},
		{"supplier_id", fmt.Sprintf("%q", e.SupplierID)}, {"amount_paise", fmt.Sprint(e.AmountPaise)},
		{"reverses", fmt.Sprintf("%q", e.Reverses)},
	}
}

func (e Entry) samePayload(o Entry) bool {
	e.Key, e.CreatedAt, o.Key, o.CreatedAt = "", "", "", ""
	return e == o
}

// Book is a ledger that post-ledger and the compensator write through: the
// ledger_entries table (or its shadow) of the ledger database, a *Ledger, or the same
// table behind the ledger's HTTP API (internal/ledgerapi). Both enforce the entry's key
// and the run's fencing token, and answer with this package's errors.
type Book interface {
	// RaiseFence raises the book's fence of t's run to t, outside any write.
	RaiseFence(ctx context.Context, t fence.Token) error
	// Post writes e under t; inserted is false when e's key already held the same
	// payload (a no-op). ErrConflict when it held another.
	Post(ctx context.Context, t fence.Token, e Entry) (inserted bool, err error)
	// Get is the entry under key; found is false when there is none.
	Get(ctx context.Context, key string) (e Entry, found bool, err error)
	// ListRun is every entry of the run, in key order.
	ListRun(ctx context.Context, runID string) ([]Entry, error)
	// Reversal is the reversal of the entry under key (see ReversalOf); ErrNoOriginal
	// when no entry holds key.
	Reversal(ctx context.Context, key, createdAt string) (Entry, error)
}

var _ Book = (*Ledger)(nil)

// Ledger is the ledger_entries table (or its shadow) of one DB.
type Ledger struct {
	db *DB
	t  tables
}

// AdoptFence moves the run's fence to t's epoch and token (`cairn fences adopt RUN`, after a
// person checked a run handed over for a foreign epoch).
func (l *Ledger) AdoptFence(ctx context.Context, t fence.Token) error {
	if err := fence.Adopt(ctx, l.db.sql, l.db.dialect, l.t.fences, t); err != nil {
		return sqlidem.Transient(fmt.Errorf("adopting ledger fence: %w", err))
	}
	return nil
}

// RaiseFence raises the ledger database's fence to t, outside any write:
// call it right after taking a lease.
func (l *Ledger) RaiseFence(ctx context.Context, t fence.Token) error {
	if err := fence.Hold(ctx, l.db.sql, l.db.dialect, l.t.fences, t); err != nil {
		return sqlidem.Transient(fmt.Errorf("raising ledger fence: %w", err))
	}
	return nil
}

// Post writes e in one transaction: the fence check, then the insert.
// It returns true when e was inserted, false when its key already holds the
// same payload (nothing changes). A key holding another payload is
// ErrConflict; a reversal of a key that does not exist is ErrNoOriginal;
// a fence held by a higher token or another epoch is fence.ErrFenced or
// fence.ErrForeignEpoch, and nothing is written.
func (l *Ledger) Post(ctx context.Context, t fence.Token, e Entry) (inserted bool, err error) {
	if err := checkEntry(t, e); err != nil {
		return false, fmt.Errorf("posting ledger entry %q: %w", e.Key, err)
	}
	err = l.db.write(ctx, func(tx *sql.Tx) error {
		if err := fence.Hold(ctx, tx, l.db.dialect, l.t.fences, t); err != nil {
			return err
		}
		if e.Reverses != "" {
			if err := l.checkReversal(ctx, tx, e); err != nil {
				return err
			}
		}
		res, err := tx.ExecContext(ctx, l.db.q(`INSERT INTO `+l.t.ledger+
			`(key, run_id, invoice_no, line, kind, supplier_id, amount_paise, reverses, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(key) DO NOTHING`),
			e.Key, e.RunID, e.InvoiceNo, e.Line, e.Kind, e.SupplierID, e.AmountPaise, nullable(e.Reverses), e.CreatedAt)
		if err != nil {
			return fmt.Errorf("inserting: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("inserting: %w", err)
		}
		if n == 1 {
			inserted = true
			return nil
		}
		stored, ok, err := l.get(ctx, tx, e.Key)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("key neither inserted nor found")
		}
		if !stored.samePayload(e) {
			return conflict(e.Key, stored.payload(), e.payload())
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("posting ledger entry %q: %w", e.Key, err)
	}
	return inserted, nil
}

func checkEntry(t fence.Token, e Entry) error {
	switch {
	case e.Key == "":
		return fmt.Errorf("empty key: %w", ErrInvalid)
	case e.RunID != t.RunID:
		return fmt.Errorf("entry of run %q under the token of run %q: %w", e.RunID, t.RunID, ErrInvalid)
	case e.Reverses == e.Key:
		return fmt.Errorf("entry reverses itself: %w", ErrInvalid)
	}
	return checkCreatedAt(e.CreatedAt)
}

func checkCreatedAt(s string) error {
	if _, err := time.Parse(time.RFC3339, s); err != nil {
		return fmt.Errorf("created_at %q is not RFC 3339: %w", s, ErrInvalid)
	}
	return nil
}

const entryColumns = `key, run_id, invoice_no, line, kind, supplier_id, amount_paise, reverses, created_at`

func scanEntry(s interface{ Scan(...any) error }) (Entry, error) {
	var (
		e        Entry
		reverses sql.NullString
	)
	err := s.Scan(&e.Key, &e.RunID, &e.InvoiceNo, &e.Line, &e.Kind, &e.SupplierID, &e.AmountPaise, &reverses, &e.CreatedAt)
	e.Reverses = reverses.String
	return e, err
}

// rowQuerier is a *sql.DB or a *sql.Tx.
type rowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (l *Ledger) get(ctx context.Context, q rowQuerier, key string) (Entry, bool, error) {
	row := q.QueryRowContext(ctx, l.db.q(`SELECT `+entryColumns+` FROM `+l.t.ledger+` WHERE key = ?`), key)
	e, err := scanEntry(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, sqlidem.Transient(fmt.Errorf("reading ledger entry %q: %w", key, err))
	}
	return e, true, nil
}

// Get reads the entry under key; false when there is none.
func (l *Ledger) Get(ctx context.Context, key string) (Entry, bool, error) {
	return l.get(ctx, l.db.sql, key)
}

// ListRun returns every entry of a run, reversals included, ordered by key byte by byte
// (on PostgreSQL too, whatever the database's collation).
func (l *Ledger) ListRun(ctx context.Context, runID string) ([]Entry, error) {
	rows, err := l.db.sql.QueryContext(ctx, l.db.q(`SELECT `+entryColumns+` FROM `+l.t.ledger+` WHERE run_id = ?`+l.db.orderByKey()), runID)
	if err != nil {
		return nil, sqlidem.Transient(fmt.Errorf("listing ledger entries of run %q: %w", runID, err))
	}
	defer rows.Close()
	var entries []Entry
	for rows.Next() {
		e, err := scanEntry(rows)
		if err != nil {
			return nil, sqlidem.Transient(fmt.Errorf("listing ledger entries of run %q: %w", runID, err))
		}
		entries = append(entries, e)
	}
	if err := rows.Err(); err != nil {
		return nil, sqlidem.Transient(fmt.Errorf("listing ledger entries of run %q: %w", runID, err))
	}
	return entries, nil
}
