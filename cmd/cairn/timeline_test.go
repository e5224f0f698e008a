package main

import (
	"slices"
	"testing"
	"time"

	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// A commit that is its record alone (a lease-free step's, no step.verified) is on the
// timeline at its finished_at; one the audit also names is counted once.
func TestTimelineVerifiedFromTheRecord(t *testing.T) {
	rec := kc.New("r1", kc.StringParams(false, "warehouse", "w1"), []string{"lease", "free", "ahead"}, "2026-12-03T10:00:00Z")
	done := "2026-12-03T10:00:02.5Z"
	for name, token := range map[string]uint64{"lease": 7, "free": 9} {
		s := rec.Step(name)
		s.Status, s.Token, s.FinishedAt = kc.Verified, kc.Ptr(token), kc.Ptr(done)
	}
	at := time.Date(2026, 12, 3, 10, 0, 1, 0, time.UTC)
	var evs []events.Event
	for _, a := range []events.Audit{
		{RunID: "r1", Step: "lease", Event: evStarted, Token: 7},
		{RunID: "r1", Step: "lease", Event: evVerified, Token: 7},
	} {
		e, err := events.New(events.AuditStepID("r1", a.Step, a.Event, a.Token), events.TypeAudit, "/cairn/test", "r1", at, a)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, e)
	}
	tl, err := buildTimeline("r1", rec, evs)
	if err != nil {
		t.Fatal(err)
	}
	if tl.Count != 2 || len(tl.Steps) != 3 {
		t.Fatalf("%d audit events, %d steps; want 2, 3", tl.Count, len(tl.Steps))
	}
	finished := time.Date(2026, 12, 3, 10, 0, 2, 500_000_000, time.UTC)
	for _, want := range []struct {
		step               string
		verified, attempts int
		finished           *time.Time
	}{{"lease", 1, 1, &at}, {"free", 1, 1, &finished}, {"ahead", 0, 0, nil}} {
		s := tl.Steps[map[string]int{"lease": 0, "free": 1, "ahead": 2}[want.step]]
		if s.Step != want.step || s.Verified != want.verified || s.Attempts != want.attempts ||
			(s.FinishedAt == nil) != (want.finished == nil) || (s.FinishedAt != nil && !s.FinishedAt.Equal(*want.finished)) {
			t.Errorf("step %s: verified %d, attempts %d, finished %v; want %d, %d, %v", s.Step, s.Verified, s.Attempts, s.FinishedAt, want.verified, want.attempts, want.finished)
		}
	}
	// Without a trusted record, the audit alone.
	if tl, err = buildTimeline("r1", nil, evs); err != nil || len(tl.Steps) != 1 || tl.Steps[0].Verified != 1 {
		t.Errorf("without the record: %+v (%v), want the step lease verified once", tl.Steps, err)
	}
}

// A run whose steps run side by side: each step's row names what it waits for, and a
// lease-free step's start is its record's started_at.
func TestTimelineShowsTheGraph(t *testing.T) {
	rec := kc.New("r2", kc.StringParams(false, "source", "f"), []string{"fetch", "a", "b", "join"}, "2026-12-03T10:00:00Z")
	rec.After = kc.Graph{"fetch": {}, "a": {"fetch"}, "b": {"fetch"}, "join": {"a", "b"}}
	for _, name := range []string{"fetch", "a", "b"} {
		s := rec.Step(name)
		s.Status, s.Token, s.StartedAt, s.FinishedAt = kc.Verified, kc.Ptr(uint64(3)), kc.Ptr("2026-12-03T10:00:01Z"), kc.Ptr("2026-12-03T10:00:02Z")
	}
	tl, err := buildTimeline("r2", rec, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"fetch": {}, "a": {"fetch"}, "b": {"fetch"}, "join": {"a", "b"}}
	began := time.Date(2026, 12, 3, 10, 0, 1, 0, time.UTC)
	for _, s := range tl.Steps {
		if !slices.Equal(s.After, want[s.Step]) || s.After == nil {
			t.Errorf("%s: after %v, want %v", s.Step, s.After, want[s.Step])
		}
		if s.Step != "join" && (s.StartedAt == nil || !s.StartedAt.Equal(began)) {
			t.Errorf("%s: started %v, want %v from the record", s.Step, s.StartedAt, began)
		}
	}
	// Steps one after another: no after on any row.
	lin, err := buildTimeline("r1", kc.New("r1", kc.StringParams(false, "w", "1"), []string{"x", "y"}, "2026-12-03T10:00:00Z"), nil)
	if err != nil || lin.Steps[1].After != nil {
		t.Errorf("a linear run's rows: %+v (%v), want no after", lin.Steps, err)
	}
}

// A run whose steps run side by side is shown waiting on all of them (cairn runs, cairn
// status --watch), one after another on the first left.
func TestInHandNamesTheStepsSideBySide(t *testing.T) {
	rec := kc.New("r3", kc.StringParams(false, "source", "f"), []string{"fetch", "a", "b", "join"}, "2026-12-03T10:00:00Z")
	rec.After = kc.Graph{"fetch": {}, "a": {"fetch"}, "b": {"fetch"}, "join": {"a", "b"}}
	if got := inHand(rec); got != "fetch" {
		t.Errorf("at the start: %q, want fetch", got)
	}
	rec.Step("fetch").Status = kc.Verified
	if got := inHand(rec); got != "a,b" {
		t.Errorf("after fetch: %q, want a,b", got)
	}
	for _, s := range rec.Pipeline {
		rec.Step(s).Status = kc.Verified
	}
	if got := inHand(rec); got != "-" {
		t.Errorf("all verified: %q, want -", got)
	}
}
