package runner_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnhq/cairn/internal/stepevent"
	"github.com/cairnhq/cairn/pkg/assets"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
)

type versioned struct {
	runner.Step
	prompt string
}

func (v versioned) Versions() kc.Versions {
	schema := "s1"
	return kc.Versions{Prompt: &v.prompt, Schema: &schema}
}

// A step that restarts under another prompt than its dead attempt's records the change.
func TestRestartUnderOtherVersionsIsRecorded(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	old, schema, code := "p1", "s1", "v0.1.0"
	rec := kc.New("r1", kc.StringParams(false, "warehouse", "w", "date", "2026-10-13"), toy.Names(), "2026-10-13T22:00:00Z")
	one := rec.Step("one")
	one.Status = kc.InProgress // its attempt died; the supervisor released the lease
	one.Versions = kc.Versions{Code: &code, Prompt: &old, Schema: &schema}
	rev, err := f.store.Create(ctx, rec)
	if err != nil {
		t.Fatal(err)
	}
	f.run(t, f.config("one", versioned{output("one"), "p2"}))
	f.run(t, f.config("two", output("two")))
	f.run(t, f.config("three", output("three")))
	if err := stepevent.Publish(ctx, f.js, assets.Default, "/cairn/test", "r1", "one", 0, rev, time.Now()); err != nil {
		t.Fatal(err)
	}
	got := f.wait(t, "r1", finishing)
	st := got.Step("one")
	if st.Versions.Prompt == nil || *st.Versions.Prompt != "p2" || got.Restarts != 1 {
		t.Fatalf("versions %+v, restarts %d", st.Versions, got.Restarts)
	}
	as := f.audit(t, "r1")
	found := false
	for _, a := range as {
		if a.Event == "version.changed" && a.Step == "one" && strings.Contains(a.Detail, "prompt p1 → p2") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no version.changed audit event naming prompt p1 → p2: %+v", as)
	}
}

// Two workers of one step given the same run at the same moment: one takes the lease and
// does the step, the other leaves it to the holder.
func TestTwoWorkersSameRunSameMoment(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	var calls atomic.Int32
	counting := stepFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
		calls.Add(1)
		return &runner.Result{Output: []byte(`{"step":"one"}`)}, nil
	})
	f.run(t, f.config("one", counting))
	f.run(t, f.config("one", counting))
	f.run(t, f.config("two", output("two")))
	f.run(t, f.config("three", output("three")))
	rev, err := f.store.Create(ctx, kc.New("r1", kc.StringParams(false, "warehouse", "w", "date", "2026-10-13"), toy.Names(), "2026-10-13T22:00:00Z"))
	if err != nil {
		t.Fatal(err)
	}
	// The same step event twice, under two ids, as two schedulers racing would publish it.
	for _, r := range []uint64{rev, rev + 1000} {
		if err := stepevent.Publish(ctx, f.js, assets.Default, "/cairn/test", "r1", "one", 0, r, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	rec := f.wait(t, "r1", finishing)
	if n := calls.Load(); n != 1 || rec.Restarts != 0 {
		t.Fatalf("step one ran %d times (restarts %d), want once", n, rec.Restarts)
	}
	if n := count(f.audit(t, "r1"), "step.verified", "one"); n != 1 {
		t.Fatalf("step one verified %d times", n)
	}
}

// A step taken again by another build records the code's change as a prompt's: a
// version.changed event naming code old → new, in last_error too, and the new build's
// version in the commit. Whether the earlier attempt died (in_progress), or failed and the
// run was handed over and resumed (pending again, its versions kept).
func TestOtherBuildIsRecordedAsAVersionChange(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status kc.StepStatus
		last   string
	}{{"restart after a crash", kc.InProgress, ""}, {"resume after a handover", kc.Pending, "boom"}} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t)
			ctx := context.Background()
			rec := kc.New("r1", kc.StringParams(false, "warehouse", "w", "date", "2026-10-13"), toy.Names(), "2026-10-13T22:00:00Z")
			one := rec.Step("one")
			one.Status = tc.status
			one.Versions = kc.Versions{Code: kc.Ptr("9bc5be173cda")}
			if tc.last != "" {
				one.LastError = kc.Ptr(tc.last)
			}
			rev, err := f.store.Create(ctx, rec)
			if err != nil {
				t.Fatal(err)
			}
			c := f.config("one", output("one"))
			c.CodeVersion = "4f0e2a9d11b7+dirty"
			f.run(t, c)
			f.run(t, f.config("two", output("two")))
			f.run(t, f.config("three", output("three")))
			if err := stepevent.Publish(ctx, f.js, assets.Default, "/cairn/test", "r1", "one", 0, rev, time.Now()); err != nil {
				t.Fatal(err)
			}
			got := f.wait(t, "r1", finishing)
			const change = "code 9bc5be173cda → 4f0e2a9d11b7+dirty"
			if v := got.Step("one").Versions.Code; v == nil || *v != "4f0e2a9d11b7+dirty" {
				t.Errorf("versions.code %v, want the new build's", v)
			}
			if l := got.Step("one").LastError; l == nil || !strings.Contains(*l, "version change: "+change) || !strings.Contains(*l, tc.last) {
				t.Errorf("last_error %v, want the version change (and the earlier error %q)", l, tc.last)
			}
			found := false
			for _, a := range f.audit(t, "r1") {
				found = found || a.Event == "version.changed" && a.Step == "one" && a.Detail == change
			}
			if !found {
				t.Fatalf("no version.changed event naming %s", change)
			}
		})
	}
}
