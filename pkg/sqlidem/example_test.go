package sqlidem_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cairnhq/cairn/pkg/fence"
	"github.com/cairnhq/cairn/pkg/idempotency"
	"github.com/cairnhq/cairn/pkg/sqlidem"
)

func Example() {
	dir, _ := os.MkdirTemp("", "sqlidem-example")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", "file:"+filepath.Join(dir, "uploads.db")+
		"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	defer db.Close()
	ctx := context.Background()

	uploads, err := sqlidem.New(db, fence.SQLite, sqlidem.Table{
		Name:    "uploads",
		Columns: []sqlidem.Column{{Name: "record", Type: "TEXT NOT NULL"}, {Name: "score", Type: "INTEGER NOT NULL"}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := uploads.Create(ctx); err != nil {
		fmt.Println(err)
		return
	}

	// The step raises the fence right after taking the run's lease.
	tok := fence.Token{RunID: "run-7", Epoch: "e7f3c1d2", Value: 12}
	if err := uploads.RaiseFence(ctx, tok); err != nil {
		fmt.Println(err)
		return
	}
	row := sqlidem.Row{Key: "run-7:rec-0001", Payload: []byte(`{"record":"rec-0001","score":42}`), Values: []any{"rec-0001", 42}}
	fmt.Println(uploads.Put(ctx, tok, row))
	// A retry after a crash: a harmless repeat.
	fmt.Println(uploads.Put(ctx, tok, row))

	// The same key with another payload is refused, naming both digests.
	other := sqlidem.Row{Key: "run-7:rec-0001", Payload: []byte(`{"record":"rec-0001","score":43}`), Values: []any{"rec-0001", 43}}
	_, err = uploads.Put(ctx, tok, other)
	var c *idempotency.ConflictError
	fmt.Println(errors.Is(err, idempotency.ErrConflict), errors.As(err, &c) && c.Stored == row.Digest() && c.New == other.Digest())

	// A newer holder raised the fence: the old one's write is refused, and writes nothing.
	newer := tok
	newer.Value = 19
	_ = uploads.RaiseFence(ctx, newer)
	late := sqlidem.Row{Key: "run-7:rec-0002", Payload: []byte(`{"record":"rec-0002","score":7}`), Values: []any{"rec-0002", 7}}
	_, err = uploads.Put(ctx, tok, late)
	fmt.Println(errors.Is(err, fence.ErrFenced))

	// Verify reads the rows back.
	var (
		record string
		score  int
	)
	digest, found, err := uploads.Get(ctx, row.Key, &record, &score)
	fmt.Println(found, record, score, digest == row.Digest(), err)
	rows, err := uploads.ListRun(ctx, "run-7")
	for _, r := range rows {
		fmt.Println(r.Key, r.Values)
	}
	fmt.Println(len(rows), err)
	// Output:
	// true <nil>
	// false <nil>
	// true true
	// true
	// true rec-0001 42 true <nil>
	// run-7:rec-0001 [rec-0001 42]
	// 1 <nil>
}

// A job that changes another row with each keyed row (here a running total) does it in the
// keyed row's transaction, and only when the row was inserted: a repeat changes nothing.
func ExampleStore_Insert() {
	dir, _ := os.MkdirTemp("", "sqlidem-example")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", "file:"+filepath.Join(dir, "points.db")+
		"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	defer db.Close()
	ctx := context.Background()

	awards, _ := sqlidem.New(db, fence.SQLite, sqlidem.Table{
		Name:    "awards",
		Columns: []sqlidem.Column{{Name: "points", Type: "INTEGER NOT NULL"}},
	})
	_ = awards.Create(ctx)
	_, _ = db.ExecContext(ctx, `CREATE TABLE totals(id TEXT PRIMARY KEY, points INTEGER NOT NULL)`)
	_, _ = db.ExecContext(ctx, `INSERT INTO totals VALUES ('all', 0)`)

	tok := fence.Token{RunID: "run-7", Epoch: "e7f3c1d2", Value: 12}
	award := func(key string, points int) error {
		return sqlidem.Write(ctx, db, fence.SQLite, func(tx *sql.Tx) error {
			row := sqlidem.Row{Key: key, Payload: fmt.Appendf(nil, "points=%d", points), Values: []any{points}}
			inserted, err := awards.Insert(ctx, tx, tok, row)
			if err != nil || !inserted {
				return err
			}
			_, err = tx.ExecContext(ctx, `UPDATE totals SET points = points + ? WHERE id = 'all'`, points)
			return err
		})
	}
	fmt.Println(award("run-7:a", 5), award("run-7:b", 3), award("run-7:a", 5)) // the last a repeat
	var total int
	_ = db.QueryRowContext(ctx, `SELECT points FROM totals WHERE id = 'all'`).Scan(&total)
	fmt.Println(total)
	// Output:
	// <nil> <nil> <nil>
	// 8
}
