package supervisor

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// The same night started under a second run id does nothing: the start lands on
// cairn.rejected naming the run that has that input, and no second record is made.
func TestStartOfTheSameInputUnderAnotherRunIDIsRejected(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.command(t, s, events.RunStartSubject, startR1)
	_, rev := f.load(t, "r1")
	stepEvent(t, f.published(t), "r1", "a", rev, 0)

	body := `{"run_id":"run-x","warehouse":"ldh","date":"2026-10-13"}`
	seq := f.command(t, s, events.RunStartSubject, body)

	f.absent(t, "run-x")
	if keys := f.keys(t); !slices.Equal(keys, []string{"r1"}) {
		t.Fatalf("bucket keys %v, want only r1", keys)
	}
	f.nonePublished(t)
	rej := f.rejections(t)
	if len(rej) != 1 {
		t.Fatalf("rejections %+v, want one", rej)
	}
	r := rej[0]
	if r.event.ID != events.RejectedID(assets.StreamRuns, seq) || r.event.Subject != "run-x" || r.data.Data != body {
		t.Fatalf("rejection %q about %q of %q, want the start of run-x", r.event.ID, r.event.Subject, r.data.Data)
	}
	if !strings.Contains(r.data.Reason, "run r1 ") || !strings.Contains(r.data.Reason, "cairn rerun r1") {
		t.Fatalf("rejection reason %q does not name run r1 and how to run it again", r.data.Reason)
	}
	if _, rev2 := f.load(t, "r1"); rev2 != rev {
		t.Fatalf("r1 written by the refused start: revision %d, was %d", rev2, rev)
	}

	// The same start of r1 is still one run, and the refusal did not wedge anything.
	f.command(t, s, events.RunStartSubject, startR1)
	if rej := f.rejections(t); len(rej) != 1 {
		t.Fatalf("rejections %+v after r1's repeated start, want still one", rej)
	}
	f.settled(t)
}

// claimOf returns the claim on the natural key of params in the test pipeline.
func (f *fixture) claimOf(t *testing.T, params kc.Params) (Claim, bool) {
	t.Helper()
	e, err := f.natural.Get(f.ctx, NaturalKeyEntry(NaturalKey(abc, params)))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Claim{}, false
	}
	if err != nil {
		t.Fatalf("reading the claim on %+v: %v", params, err)
	}
	var c Claim
	if err := json.Unmarshal(e.Value(), &c); err != nil {
		t.Fatalf("claim %q: %v", e.Value(), err)
	}
	return c, true
}

// putClaim writes a claim as a start that died after claiming would have left it.
func (f *fixture) putClaim(t *testing.T, params kc.Params, runID string) {
	t.Helper()
	natural := NaturalKey(abc, params)
	b, _ := json.Marshal(Claim{RunID: runID, NaturalKey: natural, ClaimedAt: "2026-10-13T21:59:00Z"})
	if _, err := f.natural.Create(f.ctx, NaturalKeyEntry(natural), b); err != nil {
		t.Fatalf("claiming %+v for %s: %v", params, runID, err)
	}
}

// A shadow run of the same night, and another night of the same warehouse, are other inputs.
func TestStartOfOtherInputsIsAccepted(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.command(t, s, events.RunStartSubject, startR1)
	f.command(t, s, events.RunStartSubject, `{"run_id":"r1-shadow","warehouse":"ldh","date":"2026-10-13","shadow":true}`)
	f.command(t, s, events.RunStartSubject, `{"run_id":"r2","warehouse":"ldh","date":"2026-10-14"}`)
	if keys := f.keys(t); !slices.Equal(keys, []string{"r1", "r1-shadow", "r2"}) {
		t.Fatalf("bucket keys %v, want three runs", keys)
	}
	if rej := f.rejections(t); len(rej) != 0 {
		t.Fatalf("rejections %+v, want none", rej)
	}
	for run, p := range map[string]kc.Params{"r1": ldh, "r1-shadow": kc.StringParams(true, "warehouse", "ldh", "date", "2026-10-13"), "r2": kc.StringParams(false, "warehouse", "ldh", "date", "2026-10-14")} {
		if c, ok := f.claimOf(t, p); !ok || c.RunID != run || c.NaturalKey != NaturalKey(abc, p) {
			t.Errorf("claim on %+v: %+v (present %t), want %s's", p, c, ok, run)
		}
	}
	f.settled(t)
}

// A start that died between its claim and its record is retried: the claim names it, so it
// goes on; until then another run id of the same input is refused naming it.
func TestStartAfterACrashBetweenTheClaimAndTheRecord(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.putClaim(t, ldh, "r1")

	f.command(t, s, events.RunStartSubject, `{"run_id":"run-x","warehouse":"ldh","date":"2026-10-13"}`)
	f.absent(t, "run-x")
	if rej := f.rejections(t); len(rej) != 1 || !strings.Contains(rej[0].data.Reason, "run r1 ") {
		t.Fatalf("rejections %+v, want one naming r1", rej)
	}

	f.command(t, s, events.RunStartSubject, startR1)
	rec, rev := f.load(t, "r1")
	if !rec.Params.Equal(ldh) {
		t.Fatalf("r1's params %+v", rec.Params)
	}
	stepEvent(t, f.published(t), "r1", "a", rev, 0)
	if rej := f.rejections(t); len(rej) != 1 {
		t.Fatalf("rejections %+v, want still one", rej)
	}
	f.settled(t)
}

// A claim whose run exists with other input (left by a start refused for its parameters) does
// not hold the input: the next start of it takes the claim over.
func TestStaleClaimIsTakenOver(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.create(t, "r9", func(r *kc.Record) { r.Params = kc.StringParams(false, "warehouse", "ldh", "date", "2026-10-14") })
	f.putClaim(t, ldh, "r9")

	f.command(t, s, events.RunStartSubject, startR1)
	if rec, _ := f.load(t, "r1"); !rec.Params.Equal(ldh) {
		t.Fatalf("r1's params %+v", rec.Params)
	}
	if c, _ := f.claimOf(t, ldh); c.RunID != "r1" {
		t.Fatalf("claim %+v, want r1's", c)
	}
	if rej := f.rejections(t); len(rej) != 0 {
		t.Fatalf("rejections %+v, want none", rej)
	}
	f.settled(t)
}

// A run undone in full has reversed all it did: its input may be started again, under another
// run id, and the claim moves to the new run.
func TestUndoneRunGivesUpItsInput(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.create(t, "r9", func(r *kc.Record) { r.Status = kc.Undone })
	f.putClaim(t, ldh, "r9")

	f.command(t, s, events.RunStartSubject, startR1)
	if rec, _ := f.load(t, "r1"); !rec.Params.Equal(ldh) {
		t.Fatalf("r1's params %+v", rec.Params)
	}
	if c, _ := f.claimOf(t, ldh); c.RunID != "r1" {
		t.Fatalf("claim %+v, want r1's", c)
	}
	if rej := f.rejections(t); len(rej) != 0 {
		t.Fatalf("rejections %+v, want none", rej)
	}
	f.settled(t)
}

// A run made by an earlier release claimed nothing; the supervisor's watch knows it, so
// another run id of its input is refused, and the claim is handed to that run.
func TestRunOfAnEarlierReleaseHoldsItsInput(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.create(t, "r0", nil)
	f.observeAll(t, s)

	f.command(t, s, events.RunStartSubject, `{"run_id":"run-x","warehouse":"ldh","date":"2026-10-13"}`)
	f.absent(t, "run-x")
	if rej := f.rejections(t); len(rej) != 1 || !strings.Contains(rej[0].data.Reason, "run r0 ") {
		t.Fatalf("rejections %+v, want one naming r0", rej)
	}
	if c, _ := f.claimOf(t, ldh); c.RunID != "r0" {
		t.Fatalf("claim %+v, want r0's", c)
	}
	f.settled(t)
}
