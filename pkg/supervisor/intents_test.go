package supervisor

import (
	"errors"
	"testing"
	"time"

	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/saga"
)

// A step whose attempts died recorded no count itself: the supervisor's handover counts its
// saga intents without an outcome into effects.intents_open.
func TestHandoverCountsTheDeadStepsOpenIntents(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	s.cfg.Pipeline = pipeline.Definition{Name: "abc", Steps: []pipeline.Step{
		{Name: "a", Kind: pipeline.BusinessWrite, Leased: true, Effects: "ledger rows"}, abc.Steps[1], abc.Steps[2],
	}}
	f.create(t, "r1", nil)
	f.take(t, "r1", "a", worker)
	for _, r := range []saga.Record{
		{Key: "k1", Phase: saga.Intent}, {Key: "k2", Phase: saga.Intent}, {Key: "k2", Phase: saga.Outcome},
		{Key: "k3", Phase: saga.Intent, Generation: 1}, // another generation's
	} {
		r.RunID, r.Step = "r1", "a"
		if err := saga.Publish(f.ctx, f.js, "/cairn/a", time.Unix(0, 0), r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.handOver(f.ctx, "r1", "a", reasonStall, errors.New("no progress for 2m"), nil); err != nil {
		t.Fatal(err)
	}
	rec := f.handedOver(t, "r1", "a", "no progress for")
	if e := rec.Step("a").Effects; e == nil || e.IntentsOpen != 1 {
		t.Fatalf("effects %+v, want 1 intent open (k1)", e)
	}
	// A step that writes nothing outside is not read for intents.
	if e := rec.Step("b").Effects; e != nil {
		t.Errorf("step b effects %+v, want null", e)
	}
}
