package books

import (
	"fmt"
	"testing"

	"golang.org/x/sync/errgroup"
)

// Two processes (two Opens of one database) post the same 40 entries at the same time,
// each checking nothing first and leaving it to the key: every round ends with exactly 40
// rows, each inserted by exactly one of them, and neither sees SQLITE_BUSY or a unique
// violation.
func TestConcurrentPostsOfTheSameKeys(t *testing.T) {
	const (
		rounds  = 15
		entries = 40
	)
	var batch []Entry
	for i := range entries {
		batch = append(batch, entry(fmt.Sprintf("INV-%04d", i/4), i%4+1, "price", int64(100*(i+1))))
	}
	forEachBackend(t, func(t *testing.T, bk backend) {
		for round := range rounds {
			t.Run(fmt.Sprintf("round-%d", round), func(t *testing.T) {
				dsn := bk.dsn(t)
				a, b := openDSN(t, dsn), openDSN(t, dsn)

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
					t.Fatal(err)
				}
				if n := countRows(t, a, "ledger_entries"); n != entries {
					t.Fatalf("%d rows, want %d", n, entries)
				}
				if got := inserted[0] + inserted[1]; got != entries {
					t.Fatalf("%d inserts reported (%d + %d), want %d", got, inserted[0], inserted[1], entries)
				}
				stored, err := b.Ledger(false).ListRun(t.Context(), run)
				if err != nil {
					t.Fatal(err)
				}
				for i, e := range stored {
					if want := byKey(batch, e.Key); e != want {
						t.Fatalf("row %d = %+v, want %+v", i, e, want)
					}
				}
			})
		}
	})
}

func byKey(batch []Entry, key string) Entry {
	for _, e := range batch {
		if e.Key == key {
			return e
		}
	}
	return Entry{}
}
