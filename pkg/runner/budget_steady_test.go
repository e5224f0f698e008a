package runner_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cairnhq/cairn/internal/stepevent"
	"github.com/cairnhq/cairn/pkg/assets"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/runner"
)

// benchLike is a ten-step pipeline as cairn bench transitions runs it: s01 to s10, leased or not.
func benchLike(leased bool) pipeline.Definition {
	d := pipeline.Definition{Name: "bench"}
	for i := 1; i <= 10; i++ {
		d.Steps = append(d.Steps, pipeline.Step{Name: fmt.Sprintf("s%02d", i), Kind: pipeline.Compute, Leased: leased})
	}
	return d
}

// small is a 200-byte output naming its run and step, as the bench's no-op step returns.
func small(_ context.Context, a *runner.Attempt) (*runner.Result, error) {
	head := `{"run":"` + a.RunID + `","step":"` + a.Step + `","pad":"`
	return &runner.Result{Output: []byte(head + strings.Repeat("x", 200-len(head)-2) + `"}`)}, nil
}

// A run of ten steps with small inline outputs, as the bench runs, keeps every output inline
// and stores nothing but its checkpoints: the budget counts inline outputs as room lent
// (kvcheckpoint), and no write of such a run needs it, so no object is stored and a
// lease-free run stores exactly the create and the ten commits. (Before, the commits of
// s07 to s09 moved nine earlier outputs to the artifact store: 1.8 stored messages a
// transition.)
func TestSmallOutputsNeverMakeRoom(t *testing.T) {
	for _, leased := range []bool{false, true} {
		t.Run(map[bool]string{false: "lease-free", true: "leased"}[leased], func(t *testing.T) {
			ctx := context.Background()
			f := setup(t)
			def := benchLike(leased)
			if err := assets.Ensure(ctx, f.js, assets.Config{Steps: def.Names(), AckWait: 5 * time.Second}); err != nil {
				t.Fatal(err)
			}
			for _, name := range def.Names() {
				c := f.config(name, stepFunc(small))
				c.Pipeline = def
				f.run(t, c)
			}
			for i := 1; i <= 3; i++ {
				runID := fmt.Sprintf("bench-%06d", i)
				rev, err := f.store.Create(ctx, kc.New(runID, kc.StringParams(false, "warehouse", "bench", "date", "2026-10-13"), def.Names(), time.Now().UTC().Format(time.RFC3339)))
				if err != nil {
					t.Fatal(err)
				}
				if err := stepevent.Publish(ctx, f.js, assets.Default, "/cairn/test", runID, "s01", 0, rev, time.Now()); err != nil {
					t.Fatal(err)
				}
				rec := f.wait(t, runID, finishing)
				hist, err := f.store.KV().History(ctx, runID)
				if err != nil {
					t.Fatal(err)
				}
				inline := 0
				for _, name := range def.Names() {
					if len(rec.Step(name).Output.Inline) > 0 {
						inline++
					}
				}
				if inline != len(def.Steps) {
					t.Errorf("run %s: %d outputs inline, want all %d", runID, inline, len(def.Steps))
				}
				if !leased && len(hist) != 1+len(def.Steps) { // a leased step writes its take too, beyond the history kept
					t.Errorf("run %s: %d checkpoints stored, want %d (the create and one a commit)", runID, len(hist), 1+len(def.Steps))
				}
				t.Logf("run %s: %d checkpoints, %d outputs inline, %d bytes", runID, len(hist), inline, len(hist[len(hist)-1].Value()))
			}
			objects, err := f.js.Stream(ctx, "OBJ_"+assets.ObjectArtifacts)
			if err != nil {
				t.Fatal(err)
			}
			if n := objects.CachedInfo().State.Msgs; n != 0 {
				t.Errorf("the artifact store holds %d messages, want none", n)
			}
		})
	}
}
