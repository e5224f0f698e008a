package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/internal/stepevent"
	"github.com/cairnhq/cairn/pkg/artifacts"
	"github.com/cairnhq/cairn/pkg/assets"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/runner"
)

// wide is an eight-step pipeline, every step leased but the third, as many steps as the night.
var wide = pipeline.Definition{Name: "wide", Steps: []pipeline.Step{
	{Name: "fetch", Kind: pipeline.SourceRead, Leased: true},
	{Name: "extract", Kind: pipeline.ModelCall, Leased: true, Memo: "the test's memo"},
	{Name: "match", Kind: pipeline.Compute},
	{Name: "compare", Kind: pipeline.SnapshotRead, Leased: true},
	{Name: "post-ledger", Kind: pipeline.BusinessWrite, Leased: true},
	{Name: "update-stock", Kind: pipeline.BusinessWrite, Leased: true},
	{Name: "debit-notes", Kind: pipeline.OutsideMessage, Leased: true},
	{Name: "report", Kind: pipeline.OutsideMessage, Leased: true},
}}

// nearKiB is a JSON output of exactly artifacts.InlineMax bytes naming its step and try: one
// that the old rule always kept inline.
func nearKiB(step string, n int) json.RawMessage {
	head := fmt.Sprintf(`{"step":%q,"n":%d,"pad":"`, step, n)
	return json.RawMessage(head + strings.Repeat("p", artifacts.InlineMax-len(head)-2) + `"}`)
}

// A run whose every output (and snapshot) is just under 1 KiB, with a long parked list, a
// 64-character run id and a long failure at the first try of three steps, stays within the record's
// limit: every step commits, each output reads back whole, the outputs that did not fit are
// objects, and the last step's failure and handover are recorded (attempts, last_error, the
// note), not refused.
func TestRecordBudgetKeepsRoomForAFailure(t *testing.T) {
	ctx := context.Background()
	js := natstest.JetStream(t)
	if err := assets.Ensure(ctx, js, assets.Config{Steps: wide.Names(), AckWait: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	store, err := kc.Open(ctx, js, assets.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	arts, err := artifacts.Open(ctx, js, assets.ObjectArtifacts)
	if err != nil {
		t.Fatal(err)
	}
	handovers, err := js.KeyValue(ctx, assets.BucketHandovers)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{js: js, store: store, artifacts: arts, handovers: handovers}

	longErr := strings.Repeat("the ledger said no, at length; ", 80) // 2.5 KiB
	var parked []kc.Parked
	for i := range 30 {
		parked = append(parked, kc.Parked{Item: fmt.Sprintf("INV-20261101-%04d-%s", i, strings.Repeat("x", 50)), Reason: strings.Repeat("unreadable ", 8)})
	}
	failsFirst := map[string]bool{"fetch": true, "compare": true, "debit-notes": true}
	tries := map[string]*atomic.Int32{}
	for _, name := range wide.Names() {
		tries[name] = &atomic.Int32{}
		c := f.config(name, stepFunc(func(_ context.Context, a *runner.Attempt) (*runner.Result, error) {
			n := int(tries[name].Add(1))
			switch {
			case n == 1 && failsFirst[name]:
				return nil, runner.Temporary(fmt.Errorf("try %d of %s: %s", n, name, longErr))
			case name == "report":
				return nil, runner.Permanent(fmt.Errorf("the relay refused the report: %s", longErr))
			}
			res := &runner.Result{Output: nearKiB(name, 0), NextAction: "run the step after " + name + ": " + longErr}
			if name == "compare" {
				res.Snapshot = nearKiB("snapshot", 0)
			}
			if name == "extract" {
				res.Parked, res.Items = parked, 1000
			}
			return res, nil
		}))
		c.Pipeline, c.LoopGuard, c.ParkLimit = wide, 3, 0.5
		f.run(t, c)
	}
	runID := strings.Repeat("r", 60) + "-big"
	rev, err := store.Create(ctx, kc.New(runID, kc.StringParams(false, "warehouse", "w", "date", "2026-11-01"), wide.Names(), "2026-11-01T22:00:00Z"))
	if err != nil {
		t.Fatal(err)
	}
	if err := stepevent.Publish(ctx, js, assets.Default, "/cairn/test", runID, "fetch", 0, rev, time.Now()); err != nil {
		t.Fatal(err)
	}
	rec := f.wait(t, runID, handedOver)

	inline, objects := 0, 0
	for _, name := range wide.Names()[:7] {
		s := rec.Step(name)
		if want := map[bool]int{true: 1}[failsFirst[name]]; s.Status != kc.Verified || s.Attempts != want {
			t.Fatalf("step %s: %s after %d failed attempts, want verified after %d", name, s.Status, s.Attempts, want)
		}
		got, err := arts.Load(ctx, s.Output)
		if err != nil || string(got) != string(nearKiB(name, 0)) {
			t.Errorf("output of %s: %d bytes (%v), want its 1 KiB back", name, len(got), err)
		}
		if len(s.Output.Inline) > 0 {
			inline++
		} else {
			objects++
		}
	}
	if objects == 0 {
		t.Errorf("every output is inline (%d): the record kept no budget", inline)
	}
	if got, err := arts.Load(ctx, rec.Snapshot); err != nil || string(got) != string(nearKiB("snapshot", 0)) {
		t.Errorf("snapshot: %d bytes (%v)", len(got), err)
	}
	ex := rec.Step("extract")
	if ex.ParkedCount != len(parked) || ex.ParkedArtifact == nil || len(ex.Parked) > kc.MaxParkedListed {
		t.Errorf("extract parked %d, listed %d, artifact %v; want %d counted with the list stored", ex.ParkedCount, len(ex.Parked), ex.ParkedArtifact, len(parked))
	}
	last := rec.Step("report")
	if last.Status != kc.Failed || last.LastError == nil || !strings.Contains(*last.LastError, "the relay refused the report") {
		t.Errorf("report: %s, attempts %d, last_error %v; want failed, naming the refusal", last.Status, last.Attempts, last.LastError)
	}
	if n := f.note(t, runID); rec.Handover == nil || *rec.Handover != n.ID || rec.Lease != nil {
		t.Errorf("handover %v, note %q, lease %+v", rec.Handover, n.ID, rec.Lease)
	}
	t.Logf("%d outputs inline, %d objects", inline, objects)
	// Every revision the run wrote was within the limit, and so is a handover written on top.
	hist, err := store.KV().History(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range hist {
		if len(e.Value()) > kc.MaxSize {
			t.Errorf("revision %d is %d bytes", e.Revision(), len(e.Value()))
		}
	}
}
