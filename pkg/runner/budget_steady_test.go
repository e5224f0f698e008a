package runner_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnhq/cairn/pkg/assets"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/runner"
)

// movedLog counts the runner's "moved for room" log lines (makeRoom), by run.
type movedLog struct {
	mu    sync.Mutex
	moved map[string]int
	attrs []slog.Attr
}

func (h *movedLog) Enabled(context.Context, slog.Level) bool { return true }

func (h *movedLog) Handle(_ context.Context, rec slog.Record) error {
	if !strings.Contains(rec.Message, "moved to the artifact store for room") {
		return nil
	}
	run := ""
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "run_id" {
			run = a.Value.String()
		}
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.moved[run]++
	return nil
}

func (h *movedLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *movedLog) WithGroup(string) slog.Handler      { return h }

func (h *movedLog) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, v := range h.moved {
		n += v
	}
	return n
}

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

// A run of ten steps with small inline outputs, as the bench runs, never has its record
// short of room: no step finds the record without room for it (no output moved out for
// room by makeRoom, no extra compare-and-set), so a lease-free run stores exactly the
// create and the ten commits. A commit leaves the next step the room it checks before it
// starts, moving what must go to the artifact store in the commit itself.
func TestSmallOutputsNeverMakeRoom(t *testing.T) {
	for _, leased := range []bool{false, true} {
		t.Run(map[bool]string{false: "lease-free", true: "leased"}[leased], func(t *testing.T) {
			ctx := context.Background()
			f := setup(t)
			def := benchLike(leased)
			if err := assets.Ensure(ctx, f.js, assets.Config{Steps: def.Names(), AckWait: 5 * time.Second}); err != nil {
				t.Fatal(err)
			}
			logs := &movedLog{moved: map[string]int{}}
			for _, name := range def.Names() {
				c := f.config(name, stepFunc(small))
				c.Pipeline, c.Logger = def, slog.New(logs)
				f.run(t, c)
			}
			for i := 1; i <= 3; i++ {
				runID := fmt.Sprintf("bench-%06d", i)
				rev, err := f.store.Create(ctx, kc.New(runID, kc.StringParams(false, "warehouse", "bench", "date", "2026-10-13"), def.Names(), time.Now().UTC().Format(time.RFC3339)))
				if err != nil {
					t.Fatal(err)
				}
				if err := runner.PublishStep(ctx, f.js, assets.Default, "/cairn/test", runID, "s01", 0, rev, time.Now()); err != nil {
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
				if !leased && len(hist) != 1+len(def.Steps) { // a leased step writes its take too, beyond the history kept
					t.Errorf("run %s: %d checkpoints stored, want %d (the create and one a commit)", runID, len(hist), 1+len(def.Steps))
				}
				t.Logf("run %s: %d checkpoints, %d outputs inline, %d bytes", runID, len(hist), inline, len(hist[len(hist)-1].Value()))
			}
			if n := logs.count(); n != 0 {
				t.Errorf("inline outputs moved out for room %d times, want never", n)
			}
		})
	}
}
