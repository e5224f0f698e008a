package books

import (
	"errors"
	"testing"
)

// A reversal is taken only as the exact negation of a row the ledger holds, and once: the
// issue's forged saga intent asked for a reversal of -987,654,321 paise, and the ledger took
// a second reversal of the same key.
func TestReversalIsTheRowsNegationOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := b.open(t)
		l := db.Ledger(false)
		e := entry("INV-0117", 3, "price", 12000)
		mustPost(t, l, token(5), e)

		forged := reversal(e)
		forged.AmountPaise = -987_654_321
		if _, err := l.Post(t.Context(), token(6), forged); !errors.Is(err, ErrNotNegation) {
			t.Fatalf("a reversal of -987654321 paise of a 12000 paise row = %v, want ErrNotNegation", err)
		}
		if n := countRows(t, db, "ledger_entries"); n != 1 {
			t.Fatalf("%d rows after the forged reversal, want 1", n)
		}

		rev, err := l.Reversal(t.Context(), e.Key, at)
		if err != nil {
			t.Fatal(err)
		}
		if rev.Key != e.Key+":rev" || rev.AmountPaise != -12000 || rev.Reverses != e.Key {
			t.Fatalf("Reversal = %+v, want %s:rev of -12000 reversing %s", rev, e.Key, e.Key)
		}
		mustPost(t, l, token(6), rev)
		if mustPost(t, l, token(6), rev) {
			t.Fatal("the same reversal again was inserted")
		}
		second := rev
		second.Key = e.Key + ":rev2"
		if _, err := l.Post(t.Context(), token(7), second); !errors.Is(err, ErrAlreadyReversed) {
			t.Fatalf("a second reversal of %s under another key = %v, want ErrAlreadyReversed", e.Key, err)
		}
		ofReversal := rev
		ofReversal.Key, ofReversal.Reverses, ofReversal.AmountPaise = rev.Key+":rev", rev.Key, 12000
		if _, err := l.Post(t.Context(), token(7), ofReversal); !errors.Is(err, ErrNotNegation) {
			t.Fatalf("a reversal of a reversal = %v, want ErrNotNegation", err)
		}
		if n := countRows(t, db, "ledger_entries"); n != 2 {
			t.Fatalf("%d ledger rows, want the entry and its one reversal", n)
		}

		s := db.Stock(false)
		setLevel(t, db, "stock_levels", "ldh", "NUT-M8", 1200, 390000)
		a := adjustment("INV-1", 1, "qty", -10, -3250)
		mustApply(t, s, token(8), a)
		bad := a
		bad.Key, bad.Reverses, bad.QtyDelta, bad.ValueDeltaPaise = a.Key+":rev", a.Key, 10, 987_654_321
		if _, err := s.Apply(t.Context(), token(9), bad); !errors.Is(err, ErrNotNegation) {
			t.Fatalf("a stock reversal of another value = %v, want ErrNotNegation", err)
		}
		srev, err := s.Reversal(t.Context(), a.Key, "undo", at)
		if err != nil {
			t.Fatal(err)
		}
		mustApply(t, s, token(9), srev)
		again := srev
		again.Key = a.Key + ":rev2"
		if _, err := s.Apply(t.Context(), token(9), again); !errors.Is(err, ErrAlreadyReversed) {
			t.Fatalf("a second stock reversal = %v, want ErrAlreadyReversed", err)
		}
		if got := level(t, s, "ldh", "NUT-M8"); got != (Level{1200, 390000}) {
			t.Fatalf("level = %+v, want the original once the one reversal stands", got)
		}
	})
}
