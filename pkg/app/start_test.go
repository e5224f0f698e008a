package app_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairnhq/cairn/internal/apptest"
	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// The same input started under a second run id is refused: Start returns the refusal naming
// the first run, and Wait of the refused run ends with it at once, instead of at its
// deadline. A start of the first run with other input is refused too; the same start sent
// again is one run.
func TestStartOfOneInputTwice(t *testing.T) {
	js := natsFor(t)
	apptest.Host(t.Context(), t, greeting(js, "twice", filepath.Join(t.TempDir(), "keys")))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	ada := map[string]any{"name": "ada"}
	if err := app.Start(ctx, js, "twice", "r-1", ada); err != nil {
		t.Fatal(err)
	}
	if rec, err := app.Wait(ctx, js, "twice", "r-1"); err != nil || rec.Status != kc.Done {
		t.Fatalf("r-1: %+v, %v; want done", rec, err)
	}

	err := app.Start(ctx, js, "twice", "r-2", ada)
	var refused *app.Refused
	if !errors.As(err, &refused) || refused.RunID != "r-2" || refused.Holder != "r-1" || !strings.Contains(refused.Reason, "run r-1 has this input already") {
		t.Fatalf("the second start of ada's input: %v (%+v), want a refusal of r-2 naming r-1", err, refused)
	}
	if refused.At.IsZero() {
		t.Error("the refusal has no time")
	}
	// A Wait bounded well below the test's limit: it must end with the refusal, not the deadline.
	wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
	defer wcancel()
	rec, err := app.Wait(wctx, js, "twice", "r-2")
	var waited *app.Refused
	if !errors.As(err, &waited) || *waited != *refused || rec != nil {
		t.Fatalf("Wait of the refused r-2: %v, %v; want the refusal %+v", rec, err, refused)
	}

	err = app.Start(ctx, js, "twice", "r-1", map[string]any{"name": "bob"})
	if !errors.As(err, &refused) || refused.RunID != "r-1" || refused.Holder != "" || !strings.Contains(refused.Reason, "exists with other parameters") {
		t.Errorf("r-1 started with other input: %v, want a refusal saying it exists with other parameters", err)
	}
	if err := app.Start(ctx, js, "twice", "r-1", ada); err != nil {
		t.Errorf("the same start of r-1 again: %v, want nil", err)
	}

	sp := assets.MustSpace("twice")
	kv, err := js.KeyValue(ctx, sp.Bucket(assets.BucketRuns))
	if err != nil {
		t.Fatal(err)
	}
	if keys, err := kv.Keys(ctx); err != nil || !slices.Equal(keys, []string{"r-1"}) {
		t.Errorf("runs %v (%v), want r-1 alone", keys, err)
	}
	audit, err := events.ReadSubject(ctx, js, sp.Stream(assets.StreamAudit), sp.Audit("r-1"))
	if err != nil {
		t.Fatal(err)
	}
	started := 0
	for _, e := range audit {
		var a events.Audit
		if e.Unmarshal(&a) == nil && a.Event == "run.started" {
			started++
		}
	}
	if started != 1 {
		t.Errorf("r-1 was started %d times, want once", started)
	}
}

// A start no supervisor answers ends with the caller's context, saying so.
func TestStartWithoutSupervisor(t *testing.T) {
	js := natsFor(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := app.Init(ctx, greeting(js, "idle", filepath.Join(t.TempDir(), "keys"))); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	defer cancelShort()
	err := app.Start(short, js, "idle", "r-1", map[string]any{"name": "ada"})
	if !errors.Is(err, app.ErrNoAnswer) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "is the supervisor running?") {
		t.Fatalf("a start with no supervisor: %v, want ErrNoAnswer after the deadline", err)
	}
}
