package books

import (
	"fmt"
	"path/filepath"
	"testing"

	"golang.org/x/sync/errgroup"
)

// The night's services start together and each opens the same fresh
// SQLite file: the first Open turns it to WAL and creates the tables while
// the others wait their turn. None may end with SQLITE_BUSY (the busy
// timeout must be in force before the journal mode is set).
func TestFreshFileOpenedByManyAtOnce(t *testing.T) {
	const (
		rounds = 100
		opens  = 8
	)
	for round := range rounds {
		dsn := "sqlite:" + filepath.Join(t.TempDir(), fmt.Sprintf("books-%d.db", round))
		var g errgroup.Group
		for range opens {
			g.Go(func() error {
				db, err := Open(t.Context(), dsn)
				if err != nil {
					return err
				}
				return db.Close()
			})
		}
		if err := g.Wait(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
}
