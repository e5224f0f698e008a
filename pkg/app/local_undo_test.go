package app_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/fence"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
	"github.com/cairnhq/cairn/pkg/saga"
	"github.com/cairnhq/cairn/pkg/sqlidem"
	"github.com/cairnhq/cairn/pkg/undo"
)

// A job that writes rows of its own table (sqlidem) and registers their reversal (undo.SQL)
// is undone from its Local: by an attribute (one item's row removed, the run still done),
// then whole (every row, the run undone).
func TestLocalUndoesByAttribute(t *testing.T) {
	dir := t.TempDir()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "rows.db")+"?_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := sqlidem.New(db, fence.SQLite, sqlidem.Table{Name: "rows", Columns: []sqlidem.Column{{Name: "item", Type: "TEXT NOT NULL"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rows.Create(t.Context()); err != nil {
		t.Fatal(err)
	}
	write := &runner.Typed[order, int]{
		Do: func(ctx context.Context, a *runner.Attempt, in order) (int, error) {
			effs := make([]runner.Effect, len(in.Items))
			for i, it := range in.Items {
				key := a.RunID + ":row:" + it
				effs[i] = runner.Effect{Key: key, Payload: it, Attrs: map[string]string{"item": it},
					Reverse: &saga.Reverse{System: "rows", Key: key + ":rev"}}
			}
			err := a.Keyed(ctx, effs, func(ctx context.Context, i int) (*saga.Receipt, error) {
				_, err := rows.Put(ctx, a.Token, sqlidem.Row{Key: effs[i].Key, Payload: []byte(in.Items[i]), Values: []any{in.Items[i]}})
				return nil, err
			})
			return len(in.Items), err
		},
		Verify: func(ctx context.Context, a *runner.Attempt, in order, n int) error {
			got, err := rows.ListRun(ctx, a.RunID)
			if err == nil && len(got) != len(in.Items) {
				err = fmt.Errorf("%d rows for %d items", len(got), len(in.Items))
			}
			return err
		},
		RaiseFences: func(ctx context.Context, a *runner.Attempt, t fence.Token) error { return rows.RaiseFence(ctx, t) },
	}
	job := app.Job{Name: "rows", Input: []string{"items"}, Steps: []app.Step{app.Write("write", write)},
		Systems: map[string]undo.System{"rows": undo.SQL{Store: rows}}}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	local, err := app.RunLocal(ctx, dir, job)
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	if err := local.Start(ctx, "r-1", order{Items: []string{"a", "b", "c"}}); err != nil {
		t.Fatal(err)
	}
	if rec, err := local.Wait(ctx, "r-1"); err != nil || rec.Status != kc.Done {
		t.Fatalf("r-1: %v, %v; want done", rec, err)
	}
	left := func() []string {
		t.Helper()
		got, err := rows.ListRun(ctx, "r-1")
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, r := range got {
			keys = append(keys, r.Key)
		}
		return keys
	}
	rec, err := local.Undo(ctx, "r-1", "undo-b", map[string]string{"item": "b"})
	if err != nil || rec.Status != kc.Done || rec.Undo.Reversed != 1 {
		t.Fatalf("the undo of item b: %+v, %v; want the run done, one effect reversed", rec, err)
	}
	if got := left(); !slices.Equal(got, []string{"r-1:row:a", "r-1:row:c"}) {
		t.Fatalf("rows after the undo of item b: %v", got)
	}
	rec, err = local.Undo(ctx, "r-1", "undo-all", nil)
	if err != nil || rec.Status != kc.Undone {
		t.Fatalf("the undo of the run: %+v, %v; want it undone", rec, err)
	}
	if got := left(); len(got) != 0 {
		t.Fatalf("rows after the undo of the run: %v", got)
	}
}
