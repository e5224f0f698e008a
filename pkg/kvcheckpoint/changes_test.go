package kvcheckpoint_test

import (
	"errors"
	"testing"

	"github.com/cairnhq/cairn/pkg/identity"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// Each link of a run's history is judged field by field: a writer changes only its own part
// (issue 38: a lease holder wrote an approval, and another step's output).
func TestChangedJudgesEachLink(t *testing.T) {
	ro := kc.DefaultRoles
	// base: fetch and extract verified, match running under its lease.
	base := func() *kc.Record {
		r := newRecord("run-1")
		for _, s := range []string{"fetch", "extract"} {
			st := r.Step(s)
			st.Status = kc.Verified
			st.Output = &kc.Output{Inline: []byte(`{"n":1}`), Digest: "sha256:aa", Size: 7}
			st.Token = kc.Ptr(uint64(3))
		}
		r.Step("match").Status = kc.InProgress
		r.Lease = &kc.Lease{Owner: "match/a", OwnerInbox: "cairn.owner.match.a", Token: 5, Step: "match", WriteID: "w1"}
		return r
	}
	for _, c := range []struct {
		name   string
		by     string
		change func(r *kc.Record)
		ok     bool
	}{
		{"match commits its own step", "match", func(r *kc.Record) {
			r.Step("match").Status = kc.Verified
			r.Step("match").Output = &kc.Output{Digest: "sha256:bb", Size: 2}
			r.Lease = nil
		}, true},
		{"match renews its lease", "match", func(r *kc.Record) { r.Lease.WriteID = "w2" }, true},
		{"match rewrites extract's output", "match", func(r *kc.Record) {
			r.Step("extract").Output = &kc.Output{Inline: []byte(`{"n":2}`), Digest: "sha256:cc", Size: 7}
		}, false},
		{"match resets extract", "match", func(r *kc.Record) { r.Step("extract").Status = kc.Pending }, false},
		{"match verifies compare", "match", func(r *kc.Record) { r.Step("compare").Status = kc.Verified }, false},
		{"an output moved to an object under its digest", "match", func(r *kc.Record) {
			r.Step("extract").Output = &kc.Output{Object: "run-1/extract/sha256:aa", Digest: "sha256:aa", Size: 7}
		}, true},
		{"match cuts extract's note to fit", "match", func(r *kc.Record) { r.Step("extract").LastError = nil }, true},
		{"match writes an approval", "match", func(r *kc.Record) {
			by := "cfo"
			r.Approval = &kc.Approval{Step: "debit-notes", PlanDigest: "sha256:dd", By: &by}
		}, false},
		{"match waits on its own plan", "match", func(r *kc.Record) {
			r.Status = kc.WaitingApproval
			r.Approval = &kc.Approval{Step: "match", PlanDigest: "sha256:dd"}
			r.Lease = nil
		}, true},
		{"match waits on another step's plan", "match", func(r *kc.Record) {
			r.Approval = &kc.Approval{Step: "debit-notes", PlanDigest: "sha256:dd"}
		}, false},
		{"match adds a command", "match", func(r *kc.Record) {
			r.Commands = append(r.Commands, kc.Command{Verb: "cancel", RequestID: "x"})
		}, false},
		{"match changes the generation", "match", func(r *kc.Record) { r.Generation++ }, false},
		{"match changes the params", "match", func(r *kc.Record) { r.Params = kc.StringParams(false, "warehouse", "blr") }, false},
		{"match marks the run done", "match", func(r *kc.Record) { r.Status = kc.Done }, false},
		{"match hands its run over", "match", func(r *kc.Record) { r.Status = kc.HandedOver; r.Lease = nil }, true},
		{"match takes a lease for compare", "match", func(r *kc.Record) { r.Lease.Step = "compare"; r.Lease.Token = 9 }, false},
		{"match writes the undo", "match", func(r *kc.Record) { r.Undo = &kc.Undo{RequestID: "u"} }, false},
		{"the compensator records an undo waiting for the lease", "compensator", func(r *kc.Record) {
			r.Commands = append(r.Commands, kc.Command{Verb: "undo", RequestID: "u"})
		}, true},
		{"the compensator adds a resume", "compensator", func(r *kc.Record) {
			r.Commands = append(r.Commands, kc.Command{Verb: "resume", RequestID: "r"})
		}, false},
		{"the compensator starts an undo", "compensator", func(r *kc.Record) {
			r.Status = kc.Undoing
			r.Undo = &kc.Undo{RequestID: "u", PreviousStatus: kc.Running}
			r.Lease = &kc.Lease{Owner: "compensator/a", Token: 7, Step: "undo"}
		}, true},
		{"the compensator resumes the run", "compensator", func(r *kc.Record) { r.Status = kc.Finishing }, false},
		{"the compensator rewrites extract", "compensator", func(r *kc.Record) { r.Step("extract").Status = kc.Pending }, false},
		{"the supervisor changes anything", "supervisor", func(r *kc.Record) {
			r.Generation++
			r.Step("extract").Status = kc.Pending
			r.Commands = append(r.Commands, kc.Command{Verb: "cancel", RequestID: "x"})
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			prev := base()
			next := prev.Clone()
			c.change(next)
			err := ro.Changed(prev, next, c.by)
			if c.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !c.ok && (!errors.Is(err, kc.ErrForged) || !errors.Is(err, identity.ErrNotAllowed)) {
				t.Fatalf("Changed = %v, want ErrForged and ErrNotAllowed", err)
			}
		})
	}
	// A finishing run settled by its last step (nothing left to send).
	fin := newRecord("run-2")
	fin.Status = kc.Finishing
	done := fin.Clone()
	done.Status = kc.Done
	if err := ro.Changed(fin, done, "report"); err != nil {
		t.Fatalf("the last step settling its run: %v", err)
	}
}
