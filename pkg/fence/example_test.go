package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cairnhq/cairn/pkg/fence"
	_ "modernc.org/sqlite"
)

func Example() {
	dir, _ := os.MkdirTemp("", "fence-example")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", "file:"+filepath.Join(dir, "ledger.db")+"?_txlock=immediate")
	defer db.Close()
	ctx := context.Background()
	db.ExecContext(ctx, fence.Schema)

	old := fence.Token{RunID: "run-2026-10-13-ldh", Epoch: "e7f3c1d2", Value: 1202}
	newer := fence.Token{RunID: "run-2026-10-13-ldh", Epoch: "e7f3c1d2", Value: 1876}

	// Each holder raises the fence right after taking the lease.
	fmt.Println(fence.Hold(ctx, db, fence.SQLite, "fences", old))
	fmt.Println(fence.Hold(ctx, db, fence.SQLite, "fences", newer))

	// The old holder's next write checks the fence in its transaction and is refused.
	tx, _ := db.BeginTx(ctx, nil)
	defer tx.Rollback()
	err := fence.Hold(ctx, tx, fence.SQLite, "fences", old)
	fmt.Println(errors.Is(err, fence.ErrFenced))
	// Output:
	// <nil>
	// <nil>
	// true
}
