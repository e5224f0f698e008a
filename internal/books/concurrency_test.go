package books

import (
	"fmt"
	"path/filepath"
	"testing"

	"golang.org/x/sync/errgroup"
)

// Two processes (two Opens of one file) post the same 40 entries at the same
// time, each checking nothing first and leaving it to the key: every round
// ends with exactly 40 rows, each inserted by exactly one of them, and
// neither sees SQLITE_BUSY.
func TestConcurrentPostsOfTheSameKeys(t *testing.T) {
	t.Parallel()
	const (
		rounds  = 15
		entries = 40
	)
	var batch []Entry
	for i := range entries {
		batch = append(batch, entry(fmt.Sprintf("INV-%04d", i/4), i%4+1, "price", int64(100*(i+1))))
	}
	for round := range rounds {
		path := filepath.Join(t.TempDir(), fmt.Sprintf("ledger-%d.db", round))
		a, b := openSQLiteAt(t, path), openSQLiteAt(t, path)

		var inserted [2]int
		var g errgroup.Group
		for i, db := range []*DB{a, b} {
			g.Go(func() error {
				l := db.Ledger(false)
				if err := l.RaiseFence(t.Context(), token(7)); err != nil {
					return err
				}
				for _, e := range batch {
					ok, err := l.Post(t.Context(), token(7), e)
					if err != nil {
						return err
					}
					if ok {
						inserted[i]++
					}
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if n := countRows(t, a, "ledger_entries"); n != entries {
			t.Fatalf("round %d: %d rows, want %d", round, n, entries)
		}
		if got := inserted[0] + inserted[1]; got != entries {
			t.Fatalf("round %d: %d inserts reported (%d + %d), want %d", round, got, inserted[0], inserted[1], entries)
		}
		stored, err := b.Ledger(false).ListRun(t.Context(), run)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range stored {
			if want := byKey(batch, e.Key); e != want {
				t.Fatalf("round %d: row %d = %+v, want %+v", round, i, e, want)
			}
		}
	}
}

func byKey(batch []Entry, key string) Entry {
	for _, e := range batch {
		if e.Key == key {
			return e
		}
	}
	return Entry{}
}
