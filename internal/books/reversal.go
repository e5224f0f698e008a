package books

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/cairnhq/cairn/pkg/sqlidem"
)

// A reversal row (one whose reverses names a key) is taken only as the exact negation of a
// row the table holds, and only once: the amount, quantity and value come from the row, not
// from whoever asks, so a forged request cannot post a reversal of any other size, and a
// second reversal of the same row under another key is refused (ErrAlreadyReversed; the
// unique index on reverses holds it too). Writing the same reversal again under its own
// key stays a no-op.

// Reversal is the reversal of the ledger entry under key, made from the row as it stands:
// key "<key>:rev", the amount negated, stamped createdAt. ErrNoOriginal when no row holds key.
func (l *Ledger) Reversal(ctx context.Context, key, createdAt string) (Entry, error) {
	e, ok, err := l.Get(ctx, key)
	if err != nil {
		return Entry{}, err
	}
	if !ok {
		return Entry{}, fmt.Errorf("reversed key %q: %w", key, ErrNoOriginal)
	}
	return ReversalOf(e, createdAt)
}

// ReversalOf is the reversal of e, a row as the ledger holds it: key "<key>:rev", the
// amount negated, stamped createdAt. ErrNotNegation when e is itself a reversal.
func ReversalOf(e Entry, createdAt string) (Entry, error) {
	if e.Reverses != "" {
		return Entry{}, fmt.Errorf("entry %q reverses %q itself: %w", e.Key, e.Reverses, ErrNotNegation)
	}
	e.Reverses, e.Key, e.AmountPaise, e.CreatedAt = e.Key, e.Key+":rev", -e.AmountPaise, createdAt
	return e, nil
}

// checkReversal holds e, a reversal, to the row it names, inside the write's transaction.
func (l *Ledger) checkReversal(ctx context.Context, tx *sql.Tx, e Entry) error {
	orig, ok, err := l.get(ctx, tx, e.Reverses)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("reversed key %q: %w", e.Reverses, ErrNoOriginal)
	}
	want := orig
	want.Key, want.CreatedAt, want.Reverses, want.AmountPaise = e.Key, e.CreatedAt, orig.Key, -orig.AmountPaise
	if orig.Reverses != "" || e != want {
		return fmt.Errorf("reversal %q of %q: %w: %s", e.Key, e.Reverses, ErrNotNegation, describeDiff(want.payload(), e.payload()))
	}
	var other string
	err = tx.QueryRowContext(ctx, l.db.q(`SELECT key FROM `+l.t.ledger+` WHERE reverses = ?`), e.Reverses).Scan(&other)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return sqlidem.Transient(fmt.Errorf("reading the reversals of %q: %w", e.Reverses, err))
	case other != e.Key:
		return fmt.Errorf("reversal %q of %q: %w by %q", e.Key, e.Reverses, ErrAlreadyReversed, other)
	}
	return nil
}

// Reversal is the reversal of the stock adjustment under key, made from the row as it
// stands: key "<key>:rev", quantity and value negated, with reason (a person's words; the
// row's own when empty), stamped createdAt. ErrNoOriginal when no row holds key.
func (s *Stock) Reversal(ctx context.Context, key, reason, createdAt string) (Adjustment, error) {
	a, ok, err := s.Get(ctx, key)
	if err != nil {
		return Adjustment{}, err
	}
	if !ok {
		return Adjustment{}, fmt.Errorf("reversed key %q: %w", key, ErrNoOriginal)
	}
	if a.Reverses != "" {
		return Adjustment{}, fmt.Errorf("adjustment %q reverses %q itself: %w", key, a.Reverses, ErrNotNegation)
	}
	if reason == "" {
		reason = "reversal of " + key
	}
	a.Reverses, a.Key, a.QtyDelta, a.ValueDeltaPaise, a.Reason, a.CreatedAt = a.Key, a.Key+":rev", -a.QtyDelta, -a.ValueDeltaPaise, reason, createdAt
	return a, nil
}

// checkReversal holds a, a reversal, to the row it names (the reason is free text).
func (s *Stock) checkReversal(ctx context.Context, tx *sql.Tx, a Adjustment) error {
	orig, ok, err := s.get(ctx, tx, a.Reverses)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("reversed key %q: %w", a.Reverses, ErrNoOriginal)
	}
	want := orig
	want.Key, want.CreatedAt, want.Reverses, want.Reason = a.Key, a.CreatedAt, orig.Key, a.Reason
	want.QtyDelta, want.ValueDeltaPaise = -orig.QtyDelta, -orig.ValueDeltaPaise
	if orig.Reverses != "" || a != want {
		return fmt.Errorf("reversal %q of %q: %w: %s", a.Key, a.Reverses, ErrNotNegation, describeDiff(want.payload(), a.payload()))
	}
	var other string
	err = tx.QueryRowContext(ctx, s.db.q(`SELECT key FROM `+s.t.adjustments+` WHERE reverses = ?`), a.Reverses).Scan(&other)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return sqlidem.Transient(fmt.Errorf("reading the reversals of %q: %w", a.Reverses, err))
	case other != a.Key:
		return fmt.Errorf("reversal %q of %q: %w by %q", a.Key, a.Reverses, ErrAlreadyReversed, other)
	}
	return nil
}

// describeDiff names the columns where got is not want.
func describeDiff(want, got fields) string {
	out := ""
	for i := range want {
		if i < len(got) && want[i] != got[i] {
			if out != "" {
				out += ", "
			}
			out += fmt.Sprintf("%s is %s, the row's negation has %s", got[i].name, got[i].value, want[i].value)
		}
	}
	if out == "" {
		out = "the row it names is itself a reversal"
	}
	return out
}
