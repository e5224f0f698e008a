package books

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"golang.org/x/sync/errgroup"
)

// checkThenPost runs two posters over the same items, each on its own handle of one
// database, the way two workers that both believe they hold a step would: each first checks
// every key and finds it missing (a barrier makes sure both checked before either writes),
// then both write every item at once (a second barrier starts them together). Only the key
// the store enforces can keep the rows single. It returns how many writes each poster saw
// insert.
func checkThenPost(t *testing.T, a, b *DB, items int, missing func(db *DB, i int) (bool, error), write func(db *DB, i int) (bool, error)) [2]int {
	t.Helper()
	var (
		checked  sync.WaitGroup
		start    = make(chan struct{})
		inserted [2]int
		g        errgroup.Group
	)
	checked.Add(2)
	for p, db := range []*DB{a, b} {
		g.Go(func() error {
			var todo []int
			for i := range items {
				ok, err := missing(db, i)
				if err != nil {
					checked.Done()
					return fmt.Errorf("poster %d checking item %d: %w", p, i, err)
				}
				if ok {
					todo = append(todo, i)
				}
			}
			checked.Done()
			<-start
			if len(todo) != items {
				return fmt.Errorf("poster %d found %d of %d items missing before anyone wrote", p, len(todo), items)
			}
			for _, i := range todo {
				ok, err := write(db, i)
				if err != nil {
					return fmt.Errorf("poster %d writing item %d: %w", p, i, err)
				}
				if ok {
					inserted[p]++
				}
			}
			return nil
		})
	}
	checked.Wait()
	close(start)
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	return inserted
}

// Two concurrent posters over the same 40 ledger entries, 15 times, on each backend: with
// the enforced key, every round leaves exactly 40 rows, both posters end without error (a
// repeat of the same payload is a no-op), and exactly one of them inserted each entry.
func TestCheckThenPostLedger(t *testing.T) {
	const rounds, entries = 15, 40
	batch := make([]Entry, entries)
	for i := range batch {
		batch[i] = entry(fmt.Sprintf("INV-%04d", i/3), i%3+1, []string{"price", "qty"}[i%2], int64(137*(i+1)))
	}
	forEachBackend(t, func(t *testing.T, bk backend) {
		for round := range rounds {
			t.Run(fmt.Sprintf("round-%d", round), func(t *testing.T) {
				dsn := bk.dsn(t)
				a, b := openDSN(t, dsn), openDSN(t, dsn)
				for _, db := range []*DB{a, b} {
					if err := db.Ledger(false).RaiseFence(t.Context(), token(7)); err != nil {
						t.Fatal(err)
					}
				}
				inserted := checkThenPost(t, a, b, entries,
					func(db *DB, i int) (bool, error) {
						_, ok, err := db.Ledger(false).Get(t.Context(), batch[i].Key)
						return !ok, err
					},
					func(db *DB, i int) (bool, error) { return db.Ledger(false).Post(t.Context(), token(7), batch[i]) })
				if got := inserted[0] + inserted[1]; got != entries {
					t.Errorf("%d inserts reported (%d + %d), want %d", got, inserted[0], inserted[1], entries)
				}
				if n := countRows(t, a, "ledger_entries"); n != entries {
					t.Fatalf("%d rows, want %d", n, entries)
				}
				stored, err := a.Ledger(false).ListRun(t.Context(), run)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range stored {
					if want := byKey(batch, e.Key); e != want {
						t.Fatalf("stored %+v, want %+v", e, want)
					}
				}
			})
		}
	})
}

// The same race on the stock store: a repeated adjustment must not move the level twice.
func TestCheckThenApplyStock(t *testing.T) {
	const rounds, adjustments = 15, 40
	batch := make([]Adjustment, adjustments)
	var qty, value int64
	for i := range batch {
		batch[i] = adjustment(fmt.Sprintf("INV-%04d", i/3), i%3+1, "qty", -int64(i%4+1), -int64(325*(i+1)))
		qty += batch[i].QtyDelta
		value += batch[i].ValueDeltaPaise
	}
	forEachBackend(t, func(t *testing.T, bk backend) {
		for round := range rounds {
			t.Run(fmt.Sprintf("round-%d", round), func(t *testing.T) {
				dsn := bk.dsn(t)
				a, b := openDSN(t, dsn), openDSN(t, dsn)
				setLevel(t, a, "stock_levels", "ldh", "NUT-M8", 100000, 10000000)
				for _, db := range []*DB{a, b} {
					if err := db.Stock(false).RaiseFence(t.Context(), token(7)); err != nil {
						t.Fatal(err)
					}
				}
				inserted := checkThenPost(t, a, b, adjustments,
					func(db *DB, i int) (bool, error) {
						_, ok, err := db.Stock(false).Get(t.Context(), batch[i].Key)
						return !ok, err
					},
					func(db *DB, i int) (bool, error) { return db.Stock(false).Apply(t.Context(), token(7), batch[i]) })
				if got := inserted[0] + inserted[1]; got != adjustments {
					t.Errorf("%d inserts reported (%d + %d), want %d", got, inserted[0], inserted[1], adjustments)
				}
				if n := countRows(t, a, "stock_adjustments"); n != adjustments {
					t.Fatalf("%d adjustments, want %d", n, adjustments)
				}
				if got, want := level(t, b.Stock(false), "ldh", "NUT-M8"), (Level{100000 + qty, 10000000 + value}); got != want {
					t.Fatalf("level %+v, want %+v (every adjustment once)", got, want)
				}
			})
		}
	})
}

// Two posters that disagree write the same 40 keys at once, each with its own amounts:
// every key ends with one row, written by one of them, and the other is told ErrConflict
// (never a raw unique-key error from the database).
func TestConcurrentConflictingPosts(t *testing.T) {
	const rounds, entries = 5, 40
	var batches [2][]Entry
	for p := range batches {
		for i := range entries {
			batches[p] = append(batches[p], entry(fmt.Sprintf("INV-%04d", i/4), i%4+1, "price", int64(100*(i+1)+p)))
		}
	}
	forEachBackend(t, func(t *testing.T, bk backend) {
		for round := range rounds {
			t.Run(fmt.Sprintf("round-%d", round), func(t *testing.T) {
				dsn := bk.dsn(t)
				dbs := []*DB{openDSN(t, dsn), openDSN(t, dsn)}
				var (
					won   [2][entries]bool
					ready sync.WaitGroup
					start = make(chan struct{})
					g     errgroup.Group
				)
				ready.Add(2)
				for p, db := range dbs {
					g.Go(func() error {
						l := db.Ledger(false)
						err := l.RaiseFence(t.Context(), token(7))
						ready.Done()
						if err != nil {
							return err
						}
						<-start
						for i, e := range batches[p] {
							ok, err := l.Post(t.Context(), token(7), e)
							switch {
							case errors.Is(err, ErrConflict):
							case err != nil:
								return fmt.Errorf("poster %d, entry %d: %w", p, i, err)
							case !ok:
								return fmt.Errorf("poster %d, entry %d: a no-op where the payloads differ", p, i)
							default:
								won[p][i] = true
							}
						}
						return nil
					})
				}
				ready.Wait()
				close(start)
				if err := g.Wait(); err != nil {
					t.Fatal(err)
				}
				stored, err := dbs[0].Ledger(false).ListRun(t.Context(), run)
				if err != nil {
					t.Fatal(err)
				}
				if len(stored) != entries {
					t.Fatalf("%d rows, want %d", len(stored), entries)
				}
				for i := range entries {
					if won[0][i] == won[1][i] {
						t.Fatalf("entry %d inserted by poster 0: %v, by poster 1: %v; want exactly one", i, won[0][i], won[1][i])
					}
					p := 1
					if won[0][i] {
						p = 0
					}
					if got := byKey(stored, batches[p][i].Key); got != batches[p][i] {
						t.Fatalf("entry %d stored %+v, want the winner's %+v", i, got, batches[p][i])
					}
				}
			})
		}
	})
}
