package runner

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/pkg/artifacts"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/fence"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/pipeline"
)

// fitCase is a runner of step s10 of a twelve-step pipeline and a record whose steps s01 to
// s09 are verified with earlier outputs of the given size, filled (parked lists, which the
// room keeps) until the commit of an own output of ownSize bytes, every output inline,
// leaves the next step less than want of room.
func fitCase(t *testing.T, earlierSize, ownSize, want int) (*Runner, *Attempt, *kc.Record, *Result, outputs) {
	t.Helper()
	ctx := context.Background()
	def := pipeline.Definition{Name: "twelve"}
	for i := 1; i <= 12; i++ {
		def.Steps = append(def.Steps, pipeline.Step{Name: fmt.Sprintf("s%02d", i), Kind: pipeline.Compute})
	}
	js := natstest.JetStream(t)
	if err := assets.Ensure(ctx, js, assets.Config{Steps: def.Names(), AckWait: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	store, err := kc.Open(ctx, js, assets.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	art, err := artifacts.Open(ctx, js, assets.ObjectArtifacts)
	if err != nil {
		t.Fatal(err)
	}
	notes, err := js.KeyValue(ctx, assets.BucketHandovers)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{JS: js, Store: store, Artifacts: art, Handovers: notes, Pipeline: def, StepName: "s10", Step: fuzzStep{}})
	if err != nil {
		t.Fatal(err)
	}
	sized := func(name string, n int) []byte {
		head := `{"step":"` + name + `","pad":"`
		return []byte(head + strings.Repeat("p", max(n-len(head)-2, 0)) + `"}`)
	}
	base := kc.New("run-fit", kc.StringParams(false, "warehouse", "w", "date", "2026-11-01"), def.Names(), "2026-11-01T22:00:00Z")
	base.Epoch = store.Epoch()
	for _, name := range def.Names()[:9] {
		s := base.Step(name)
		out, err := art.Save(ctx, base.RunID, name, sized(name, earlierSize))
		if err != nil || len(out.Inline) == 0 {
			t.Fatalf("output of %s: %+v, %v; want it inline", name, out, err)
		}
		s.Status, s.Output, s.Token, s.FinishedAt = kc.Verified, out, kc.Ptr(uint64(7)), kc.Ptr("2026-11-01T22:00:01Z")
	}
	base.Step("s10").Status = kc.InProgress
	a := &Attempt{RunID: base.RunID, Step: "s10", Token: fence.Token{RunID: base.RunID, Value: 9}}
	res := &Result{Output: sized("s10", ownSize)}
	own, err := art.Save(ctx, base.RunID, "s10", res.Output)
	if err != nil || len(own.Inline) == 0 {
		t.Fatalf("own output: %+v, %v; want it inline", own, err)
	}
	room := func() int {
		n := base.Clone()
		r.applyCommit(n, a, res, outputs{output: own})
		return kc.StepRoom(n, "s11")
	}
	for i := 0; room() >= want; i++ {
		s := base.Step(def.Names()[i%9])
		s.Parked = append(s.Parked, kc.Parked{Item: fmt.Sprintf("INV-%04d", i), Reason: "unreadable"})
		s.ParkedCount = len(s.Parked)
	}
	return r, a, base, res, outputs{output: own}
}

// A commit whose next step would be short of room moves the earlier steps' outputs out, the
// largest first, and keeps its own inline when that is enough; the committed record leaves
// the next step its room.
func TestFitOutputsMovesEarlierOutputs(t *testing.T) {
	r, a, base, res, o := fitCase(t, 400, 400, listMargin)
	got, err := r.fitOutputs(context.Background(), a, base, res, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.output.Inline) == 0 || len(got.moved) == 0 {
		t.Fatalf("own output inline %t, %d earlier moved; want it inline and earlier ones moved", len(got.output.Inline) > 0, len(got.moved))
	}
	n := base.Clone()
	r.applyCommit(n, a, res, got)
	if room := kc.StepRoom(n, "s11"); room < listMargin {
		t.Fatalf("the next step's room is %d after the commit, want at least %d", room, listMargin)
	}
	for name, m := range got.moved {
		if s := n.Step(name); len(s.Output.Inline) > 0 || s.Output.Object == "" || s.Output.Digest != base.Step(name).Output.Digest {
			t.Errorf("output of %s in the commit: %+v; want the object of the same digest", name, s.Output)
		}
		if m.Object == "" {
			t.Errorf("moved %s: %+v", name, m)
		}
	}
}

// Earlier outputs smaller than a pointer give nothing back: the commit moves its own, larger
// output instead, and no earlier one.
func TestFitOutputsSkipsWhatGivesNothingBack(t *testing.T) {
	r, a, base, res, o := fitCase(t, 8, 900, 0)
	got, err := r.fitOutputs(context.Background(), a, base, res, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.output.Inline) > 0 || len(got.moved) > 0 {
		t.Fatalf("own output inline %t, %d earlier moved; want it moved and no earlier one", len(got.output.Inline) > 0, len(got.moved))
	}
	n := base.Clone()
	r.applyCommit(n, a, res, got)
	if room := kc.StepRoom(n, "s11"); room < listMargin {
		t.Fatalf("the next step's room is %d after the commit, want at least %d", room, listMargin)
	}
}
