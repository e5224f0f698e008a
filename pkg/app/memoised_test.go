package app_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairnhq/cairn/internal/apptest"
	"github.com/cairnhq/cairn/pkg/app"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/runner"
)

// Attempt.Memoised counts the keys that start with its prefix, as its doc says: whole
// tokens ("classify", "classify."), a partial last token ("classify.inv-"), or none (issue 34:
// "classify." gave an invalid subject, found only after a crash).
func TestMemoisedCountsKeysByPrefix(t *testing.T) {
	js := natsFor(t)
	prefixes := []string{"", "classify", "classify.", "classify.inv-", "classify.inv-1", "class", "route", "route.", "nothing", "nothing."}
	count := stepFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
		for _, k := range []string{"classify.inv-1", "classify.inv-2", "classify.credit-1", "route.x"} {
			if _, err := a.Memo(ctx, k, func(context.Context) ([]byte, error) { return []byte(k), nil }); err != nil {
				return nil, err
			}
		}
		counts := map[string]int{}
		for _, p := range prefixes {
			n, err := a.Memoised(ctx, p)
			if err != nil {
				return nil, err
			}
			counts[p] = n
		}
		return output(counts), nil
	})
	def := pipeline.Definition{Name: "memos", Input: []string{"name"}, Steps: []pipeline.Step{
		{Name: "count", Kind: pipeline.ModelCall, Leased: true, Effects: "a paid call per key", Memo: "<run>.<key>", Recovery: "memoised"},
	}}
	apptest.Host(t.Context(), t, app.Config{JS: js, KeysDir: filepath.Join(t.TempDir(), "keys"), Pipeline: def,
		Steps: map[string]runner.Step{"count": count}})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := app.Start(ctx, js, "memos", "r-1", map[string]any{"name": "ada"}); err != nil {
		t.Fatal(err)
	}
	rec, err := app.Wait(ctx, js, "memos", "r-1")
	if err != nil || rec.Status != kc.Done {
		t.Fatalf("r-1: %+v, %v; want done", rec, err)
	}
	var got map[string]int
	if err := json.Unmarshal(rec.Step("count").Output.Inline, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"": 4, "classify": 3, "classify.": 3, "classify.inv-": 2, "classify.inv-1": 1, "class": 3, "route": 1, "route.": 1, "nothing": 0, "nothing.": 0}
	for p, n := range want {
		if got[p] != n {
			t.Errorf("Memoised(%q) = %d, want %d", p, got[p], n)
		}
	}
}
