package ledgerapi

import (
	"context"
	"fmt"

	"github.com/cairnhq/cairn/internal/books"
	"github.com/cairnhq/cairn/pkg/fence"
	"github.com/cairnhq/cairn/pkg/httpidem"
)

// keyTables are the middleware's tables (httpidem.SQLStore).
var keyTables = []string{"http_idempotency_keys", "http_fence_tokens"}

// Store is the middleware's store in db, the ledger's own database.
func Store(db *books.DB) *httpidem.SQLStore {
	if db.Dialect() == fence.Postgres {
		return httpidem.NewPostgresStore(db.SQL())
	}
	return httpidem.NewSQLiteStore(db.SQL())
}

// CreateTables creates the middleware's tables in db where missing. On PostgreSQL a
// table that exists is left alone, as books.Open leaves the ledger's: the service's own
// role may use them but not create any (`cairn init --tables` makes them as their owner).
func CreateTables(ctx context.Context, db *books.DB) error {
	if db.Dialect() == fence.Postgres {
		missing := false
		for _, t := range keyTables {
			var exists bool
			if err := db.SQL().QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, t).Scan(&exists); err != nil {
				return fmt.Errorf("looking up table %s: %w", t, err)
			}
			missing = missing || !exists
		}
		if !missing {
			return nil
		}
	}
	return Store(db).CreateTables(ctx)
}
