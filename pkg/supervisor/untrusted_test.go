package supervisor

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
)

// forge writes a record as anyone who may write the bucket can: change applied to a new
// record, its sum computed as the code does, no check of what it says. It returns the
// revision.
func (f *fixture) forge(t *testing.T, runID string, change func(r *kc.Record)) uint64 {
	t.Helper()
	rec := kc.New(runID, ldh, abc.Names(), "2026-10-13T22:00:00Z")
	rec.Epoch = f.store.Epoch()
	change(rec)
	b, err := kc.Encode(rec)
	if err != nil {
		t.Fatalf("encoding the forged record: %v", err)
	}
	rev, err := f.store.KV().Put(f.ctx, runID, b)
	if err != nil {
		t.Fatalf("writing the forged record: %v", err)
	}
	return rev
}

// waitingNoApproval: a run waiting for approval with no approval, its progress long ago (so
// its approval timeout is over at once).
func waitingNoApproval(r *kc.Record) {
	r.Status = kc.WaitingApproval
	r.Approval = nil
	r.ProgressedAt = "2026-10-01T00:00:00Z"
	r.UpdatedAt = r.ProgressedAt
}

// emptyPipeline: a running run with no steps at all.
func emptyPipeline(r *kc.Record) {
	r.Pipeline = []string{}
	r.Steps = map[string]*kc.Step{}
}

// recordNote checks that the run was handed over by a note alone, the forged entry kept as
// it was written.
func (f *fixture) recordNote(t *testing.T, runID string, rev uint64) {
	t.Helper()
	e, err := f.notes.Get(f.ctx, runID)
	if err != nil {
		t.Fatalf("no handover note for %s: %v", runID, err)
	}
	var n runner.HandoverNote
	if err := json.Unmarshal(e.Value(), &n); err != nil {
		t.Fatalf("handover note %s: %v", e.Value(), err)
	}
	if n.ID != runID+":handover:record" || n.RunID != runID || n.Error == "" {
		t.Fatalf("handover note %+v, want %s:handover:record naming the broken record", n, runID)
	}
	cur, err := f.store.KV().Get(f.ctx, runID)
	if err != nil {
		t.Fatalf("reading %s: %v", runID, err)
	}
	if cur.Revision() != rev {
		t.Fatalf("the forged record of %s was written over: revision %d, forged at %d", runID, cur.Revision(), rev)
	}
}

// A run waiting for approval with no approval: the startup sweep read w.rec.Approval.Step
// (a nil dereference) once its approval timeout was over, so every restart of the
// supervisor died on it; and a reject of it dereferenced the approval too. Now the record
// is not trusted: never swept, the run handed over by a note, the command rejected.
func TestWaitingRunWithoutApprovalIsHandedOver(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	rev := f.forge(t, "run-w", waitingNoApproval)
	f.create(t, "run-ok", nil)
	f.observeAll(t, s)
	s.SweepOnce(f.ctx, true)
	f.recordNote(t, "run-w", rev)
	// The healthy run is swept as ever: its first step's event is published again.
	if m := f.published(t); m.Subject != events.StepSubject("a", "run-ok") {
		t.Fatalf("step event on %s, want the healthy run's", m.Subject)
	}

	seq := f.command(t, s, "cairn.runs.run-w.reject", "")
	f.settled(t)
	if !rejectedSeq(f.rejections(t), seq) {
		t.Fatalf("the reject of the untrusted run was not rejected: %+v", f.rejections(t))
	}
	f.recordNote(t, "run-w", rev)
}

// A run with an empty pipeline: a start of its run id again read rec.Pipeline[0]. Now the
// start is rejected and the run handed over by a note.
func TestEmptyPipelineIsHandedOver(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	rev := f.forge(t, "run-e", emptyPipeline)
	seq := f.command(t, s, "cairn.runs.start", `{"run_id":"run-e","warehouse":"ldh","date":"2026-10-13"}`)
	f.settled(t)
	if !rejectedSeq(f.rejections(t), seq) {
		t.Fatalf("the start of the untrusted run was not rejected: %+v", f.rejections(t))
	}
	f.observeAll(t, s)
	s.clockedSweeps(f, 3)
	f.recordNote(t, "run-e", rev)
}

// clockedSweeps sweeps n times, a lease apart on the test clock.
func (s *Supervisor) clockedSweeps(f *fixture, n int) {
	for i := range n {
		s.SweepOnce(f.ctx, i == 0)
		f.clock.Advance(testLease + time.Second)
	}
}

func rejectedSeq(rs []rejected, seq uint64) bool {
	for _, r := range rs {
		if r.data.Seq == seq {
			return true
		}
	}
	return false
}

// A reject of a run waiting for approval with no approval read rec.Approval.PlanDigest
// after writing the record (a nil dereference). Now it is rejected, the record untouched.
func TestRejectOfWaitingRunWithoutApproval(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	rev := f.forge(t, "run-r", waitingNoApproval)
	seq := f.command(t, s, "cairn.runs.run-r.reject", "")
	f.settled(t)
	if !rejectedSeq(f.rejections(t), seq) {
		t.Fatalf("the reject of the untrusted run was not rejected: %+v", f.rejections(t))
	}
	if e, err := f.store.KV().Get(f.ctx, "run-r"); err != nil || e.Revision() != rev {
		t.Fatalf("the forged record was written over: %v", err)
	}
}
