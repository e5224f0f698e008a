package supervisor

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
)

func TestCancelStopsARunningRunAndCopiesItsLease(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.create(t, "r1", nil)
	h := f.take(t, "r1", "a", kc.Owner{Name: "a/host/1", Inbox: "cairn.owner.a.one0000000000000000000"})
	held, _ := h.Record()

	f.command(t, s, events.RunSubject("r1", events.VerbCancel), `{"request_id":"cancel-1"}`)

	rec, rev := f.load(t, "r1")
	if rec.Status != kc.Cancelled {
		t.Fatalf("status %s, want cancelled", rec.Status)
	}
	if rec.Lease == nil || *rec.Lease != *held.Lease {
		t.Fatalf("lease %+v, want the holder's %+v unchanged", rec.Lease, held.Lease)
	}
	if rec.Step("a").Status != kc.InProgress {
		t.Fatalf("step a %s, want in_progress (the holder finishes it)", rec.Step("a").Status)
	}
	if !slices.Equal(rec.Requests, []string{"cancel-1"}) {
		t.Fatalf("requests %v", rec.Requests)
	}
	if !strings.Contains(rec.NextAction, "cairn resume r1") {
		t.Fatalf("next_action %q", rec.NextAction)
	}
	if ids := f.auditIDs(t, "r1", "run.cancelled"); !slices.Equal(ids, []string{events.AuditStepID("r1", "run", "cancelled", rev)}) {
		t.Fatalf("run.cancelled audit ids %v", ids)
	}

	// The holder still owns the lease: its next write (the commit) goes through.
	if err := h.Renew(f.ctx); err != nil {
		t.Fatalf("the holder renewing after a cancel: %v", err)
	}
	f.nonePublished(t)
	f.settled(t)
}

func TestCancelAppliesEachRequestOnce(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.create(t, "r1", nil)

	f.command(t, s, events.RunSubject("r1", events.VerbCancel), `{"request_id":"cancel-1"}`)
	if rec, _ := f.load(t, "r1"); rec.Status != kc.Cancelled {
		t.Fatalf("status %s after the first cancel, want cancelled", rec.Status)
	}
	// Resumed in between, so a second application would show.
	_, _, err := f.store.Mutate(f.ctx, "r1", func(r *kc.Record) error { r.Status = kc.Running; return nil })
	if err != nil {
		t.Fatalf("setting r1 running: %v", err)
	}
	_, rev := f.load(t, "r1")

	f.command(t, s, events.RunSubject("r1", events.VerbCancel), `{"request_id":"cancel-1"}`)

	rec, rev2 := f.load(t, "r1")
	if rev2 != rev || rec.Status != kc.Running {
		t.Fatalf("replayed cancel: revision %d (was %d), status %s; want nothing written", rev2, rev, rec.Status)
	}
	if !slices.Equal(rec.Requests, []string{"cancel-1"}) {
		t.Fatalf("requests %v", rec.Requests)
	}
	if ids := f.auditIDs(t, "r1", "run.cancelled"); len(ids) != 1 {
		t.Fatalf("run.cancelled audit ids %v, want one", ids)
	}
	if rej := f.rejections(t); len(rej) != 0 {
		t.Fatalf("rejections %+v", rej)
	}
	f.settled(t)
}

func TestCancelOfAnUnknownRunIsRejected(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)

	seq := f.command(t, s, events.RunSubject("ghost", events.VerbCancel), ``)

	f.absent(t, "ghost")
	rej := f.rejections(t)
	if len(rej) != 1 {
		t.Fatalf("rejections %+v, want one", rej)
	}
	if r := rej[0]; r.event.Subject != "ghost" || r.data.Seq != seq || !strings.Contains(r.data.Reason, "ghost") {
		t.Fatalf("rejection %+v / %+v", r.event, r.data)
	}
	f.settled(t)
}

func TestResumeRestartsTheFailedStep(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.create(t, "r1", func(r *kc.Record) {
		r.Status = kc.HandedOver
		r.Generation = 2
		r.Step("a").Status = kc.Verified
		r.Step("b").Status = kc.Failed
		r.Step("b").Attempts = 3
		r.Step("b").SetLastError("boom")
		r.Handover = kc.Ptr("ho-1")
	})

	f.command(t, s, events.RunSubject("r1", events.VerbResume), `{"request_id":"resume-1"}`)

	rec, rev := f.load(t, "r1")
	if rec.Status != kc.Running || rec.Handover != nil || rec.Lease != nil {
		t.Fatalf("status %s handover %v lease %v, want running, no handover, no lease", rec.Status, rec.Handover, rec.Lease)
	}
	if b := rec.Step("b"); b.Status != kc.Pending || b.Attempts != 0 {
		t.Fatalf("step b %s with %d attempts, want pending with 0", b.Status, b.Attempts)
	}
	if rec.Step("a").Status != kc.Verified || rec.Step("c").Status != kc.Pending {
		t.Fatalf("steps a %s c %s", rec.Step("a").Status, rec.Step("c").Status)
	}
	if !slices.Equal(rec.Requests, []string{"resume-1"}) {
		t.Fatalf("requests %v", rec.Requests)
	}
	stepEvent(t, f.published(t), "r1", "b", rev, 2)
	f.nonePublished(t)
	if ids := f.auditIDs(t, "r1", "run.resumed"); !slices.Equal(ids, []string{events.AuditStepID("r1", "run", "resumed", rev)}) {
		t.Fatalf("run.resumed audit ids %v", ids)
	}

	// The same request again writes and publishes nothing.
	f.command(t, s, events.RunSubject("r1", events.VerbResume), `{"request_id":"resume-1"}`)
	if _, rev2 := f.load(t, "r1"); rev2 != rev {
		t.Fatalf("replayed resume wrote revision %d", rev2)
	}
	f.nonePublished(t)
	f.settled(t)
}

func TestResumeOfARunningRunDoesNothing(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	rev := f.create(t, "r1", nil)

	f.command(t, s, events.RunSubject("r1", events.VerbResume), ``)

	if _, rev2 := f.load(t, "r1"); rev2 != rev {
		t.Fatalf("resume of a running run wrote revision %d", rev2)
	}
	f.nonePublished(t)
	if rej := f.rejections(t); len(rej) != 0 {
		t.Fatalf("rejections %+v", rej)
	}
	f.settled(t)
}

func TestResumeOfAnUnknownRunIsRejected(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)

	f.command(t, s, events.RunSubject("ghost", events.VerbResume), ``)

	f.absent(t, "ghost")
	if rej := f.rejections(t); len(rej) != 1 || rej[0].event.Subject != "ghost" {
		t.Fatalf("rejections %+v, want one naming ghost", rej)
	}
	f.settled(t)
}

// A cancel of a run that is no longer active changes nothing.
func TestCancelOfADoneRunWritesNothing(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	rev := f.create(t, "r1", func(r *kc.Record) { r.Status = kc.Done })
	f.command(t, s, events.RunSubject("r1", "cancel"), "")
	if rec, got := f.load(t, "r1"); got != rev || rec.Status != kc.Done {
		t.Fatalf("after cancelling a done run: revision %d (was %d), status %s", got, rev, rec.Status)
	}
	f.settled(t)
}

// A resume that finds the cancelled run's holder still working is not lost to a delivery
// limit: it waits in the record (who asked, when) and its message is settled; once the holder
// releases the lease the sweep sends it again, and it is carried out once.
func TestResumeWaitsForTheLease(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.create(t, "r1", nil)
	h := f.take(t, "r1", "a", kc.Owner{Name: "a/host/1", Inbox: "cairn.owner.a.x000000000000000000000"})
	if _, _, err := f.store.Mutate(f.ctx, "r1", func(r *kc.Record) error { r.Status = kc.Cancelled; return nil }); err != nil {
		t.Fatal(err)
	}
	f.command(t, s, events.RunSubject("r1", "resume"), `{"request_id":"resume-1"}`)
	rec, _ := f.load(t, "r1")
	w := rec.Waiting("resume-1")
	if rec.Status != kc.Cancelled || w == nil || w.Verb != "resume" || w.By != events.SourceNATSCLI || w.At == "" || rec.HasRequest("resume-1") {
		t.Fatalf("resume while the lease stands: status %s, waiting %+v, requests %v; want cancelled, the resume waiting with who and when", rec.Status, rec.Commands, rec.Requests)
	}
	f.settled(t) // the record keeps it, not the delivery
	if rej := f.rejections(t); len(rej) != 0 {
		t.Fatalf("rejections %+v, want none", rej)
	}
	// The same request again (a retried publish) waits once.
	f.command(t, s, events.RunSubject("r1", "resume"), `{"request_id":"resume-1"}`)
	if rec, _ := f.load(t, "r1"); len(rec.Commands) != 1 {
		t.Fatalf("waiting %+v, want the one resume", rec.Commands)
	}
	// The holder commits and releases (its writes keep what waits); the sweep drives it.
	if err := h.Release(f.ctx, func(r *kc.Record) error { r.Step("a").Status = kc.Verified; return nil }); err != nil {
		t.Fatal(err)
	}
	if rec, _ := f.load(t, "r1"); rec.Waiting("resume-1") == nil || rec.Status != kc.Cancelled {
		t.Fatalf("after the holder's release: status %s, waiting %+v", rec.Status, rec.Commands)
	}
	f.observeAll(t, s)
	s.SweepOnce(f.ctx, false)
	rec, rev := f.load(t, "r1")
	if rec.Status != kc.Running || len(rec.Commands) != 0 || !rec.HasRequest("resume-1") {
		t.Fatalf("after the sweep: status %s, waiting %+v, requests %v; want running, nothing waiting, the resume applied", rec.Status, rec.Commands, rec.Requests)
	}
	stepEvent(t, f.published(t), "r1", "b", rev, 0)
	f.settled(t)
}

// A command that waits for a lease never freed ends in a handover whose note names it.
func TestWaitingCommandHandedOverAfterStall(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.create(t, "r1", nil)
	f.take(t, "r1", "a", kc.Owner{Name: "a/host/1", Inbox: "cairn.owner.a.x000000000000000000000"})
	if _, _, err := f.store.Mutate(f.ctx, "r1", func(r *kc.Record) error { r.Status = kc.Cancelled; return nil }); err != nil {
		t.Fatal(err)
	}
	f.command(t, s, events.RunSubject("r1", "resume"), `{"request_id":"resume-9"}`)
	f.observeAll(t, s)
	f.clock.Advance(testStall + time.Second)
	s.SweepOnce(f.ctx, false)
	rec, _ := f.load(t, "r1")
	if rec.Status != kc.HandedOver || len(rec.Commands) != 0 || rec.Lease != nil || rec.Handover == nil {
		t.Fatalf("status %s, waiting %+v, lease %+v, handover %v; want handed over, nothing waiting, no lease", rec.Status, rec.Commands, rec.Lease, rec.Handover)
	}
	e, err := f.notes.Get(f.ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	var note struct{ Error string }
	if err := json.Unmarshal(e.Value(), &note); err != nil || !strings.Contains(note.Error, "resume resume-9") {
		t.Fatalf("handover note %s (%v): want it to name the waiting resume-9", e.Value(), err)
	}
}

// handedOverAt writes a run handed over at step with last error why, the steps before it
// verified (with outputs and tokens) and a source fingerprint.
func (f *fixture) handedOverAt(t *testing.T, runID, step, why string) {
	t.Helper()
	f.create(t, runID, func(r *kc.Record) {
		fp := "sha256:old"
		r.SourceFingerprint = &fp
		for _, name := range r.Pipeline {
			if name == step {
				break
			}
			tok := uint64(7)
			r.Step(name).Status = kc.Verified
			r.Step(name).Token = &tok
			r.Step(name).Output = &kc.Output{Inline: []byte(`{}`), Digest: "SHA-256=x", Size: 2}
		}
		r.Step(step).Status = kc.Failed
		r.Step(step).Attempts = 2
		r.Step(step).SetLastError(why)
		r.Status = kc.HandedOver
		note := runID + ":handover:" + step + ":9"
		r.Handover = &note
	})
}

func TestResumeAfterFixOfAChangedSourceRerunsFromTheFirstStep(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.handedOverAt(t, "r1", "c", "permanent\nsource changed since the run read it: [INV-7]")
	f.command(t, s, events.RunSubject("r1", events.VerbResume), `{"after_fix":true}`)
	rec, rev := f.load(t, "r1")
	if rec.Status != kc.Running || rec.Generation != 1 || rec.SourceFingerprint != nil || rec.Handover != nil {
		t.Fatalf("status %s, generation %d, fingerprint %v, handover %v", rec.Status, rec.Generation, rec.SourceFingerprint, rec.Handover)
	}
	for _, name := range rec.Pipeline {
		if st := rec.Step(name); st.Status != kc.Pending || st.Attempts != 0 || st.Output != nil || (st.LastError != nil && name != "a") {
			t.Errorf("step %s: %+v, want a fresh pending step", name, st)
		}
	}
	// The first step says that a person accepted the change: the evidence a later step that
	// cannot be undone waits on.
	if le := rec.Step("a").LastError; le == nil || !strings.HasPrefix(*le, runner.DriftAccepted) || !strings.Contains(*le, "INV-7") {
		t.Errorf("step a's last error %v, want it to say %q, naming the change", le, runner.DriftAccepted)
	}
	stepEvent(t, f.published(t), "r1", "a", rev, 1)
	f.settled(t)
}

func TestResumeAfterFixRerunsFromTheStepThatStopped(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.handedOverAt(t, "r1", "c", "ledger refused every entry")
	f.command(t, s, events.RunSubject("r1", events.VerbResume), `{"after_fix":true}`)
	rec, rev := f.load(t, "r1")
	if rec.Status != kc.Running || rec.Generation != 1 || rec.SourceFingerprint == nil {
		t.Fatalf("status %s, generation %d, fingerprint %v", rec.Status, rec.Generation, rec.SourceFingerprint)
	}
	if rec.Step("a").Status != kc.Verified || rec.Step("b").Status != kc.Verified || rec.Step("c").Status != kc.Pending || rec.Step("c").Attempts != 0 {
		t.Fatalf("steps a %s, b %s, c %+v", rec.Step("a").Status, rec.Step("b").Status, rec.Step("c"))
	}
	stepEvent(t, f.published(t), "r1", "c", rev, 1)
	if ids := f.auditIDs(t, "r1", "run.resumed"); len(ids) != 1 {
		t.Fatalf("resumed audit events %v", ids)
	}
}

func TestRerunFromAStep(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.handedOverAt(t, "r1", "c", "whatever")
	if _, _, err := f.store.Mutate(f.ctx, "r1", func(r *kc.Record) error {
		r.Status = kc.Done
		r.Handover = nil
		r.Step("c").Status = kc.Verified
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	f.command(t, s, events.RunSubject("r1", events.VerbRerun), `{"from":"b"}`)
	rec, rev := f.load(t, "r1")
	if rec.Status != kc.Running || rec.Generation != 1 || rec.Step("a").Status != kc.Verified ||
		rec.Step("b").Status != kc.Pending || rec.Step("c").Status != kc.Pending || rec.SourceFingerprint == nil {
		t.Fatalf("after rerun --from b: status %s generation %d a %s b %s c %s", rec.Status, rec.Generation, rec.Step("a").Status, rec.Step("b").Status, rec.Step("c").Status)
	}
	stepEvent(t, f.published(t), "r1", "b", rev, 1)
	if ids := f.auditIDs(t, "r1", "run.rerun"); len(ids) != 1 {
		t.Fatalf("rerun audit events %v", ids)
	}
	f.settled(t)

	// The run is running now: another rerun is refused, as are an unknown step and no step.
	f.command(t, s, events.RunSubject("r1", events.VerbRerun), `{"from":"b"}`)
	f.command(t, s, events.RunSubject("r1", events.VerbRerun), `{"from":"zz"}`)
	f.command(t, s, events.RunSubject("r1", events.VerbRerun), ``)
	rej := f.rejections(t)
	if len(rej) != 3 || !strings.Contains(rej[0].data.Reason, "running") || !strings.Contains(rej[1].data.Reason, `"zz"`) || !strings.Contains(rej[2].data.Reason, "--from") {
		t.Fatalf("rejections %+v", rej)
	}
	if _, rev2 := f.load(t, "r1"); rev2 != rev {
		t.Fatalf("a refused rerun wrote revision %d", rev2)
	}
}

// waiting writes a run that waits for the approval of step c's plan.
func (f *fixture) waiting(t *testing.T, runID string) {
	t.Helper()
	f.create(t, runID, func(r *kc.Record) {
		tok := uint64(3)
		for _, name := range []string{"a", "b"} {
			r.Step(name).Status = kc.Verified
			r.Step(name).Token = &tok
		}
		r.Status = kc.WaitingApproval
		r.Approval = &kc.Approval{Step: "c", PlanDigest: "SHA-256=plan"}
	})
}

func TestApproveLetsTheWaitingStepGoOn(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.waiting(t, "r1")
	f.command(t, s, events.RunSubject("r1", events.VerbApprove), `{"by":"asha"}`)
	rec, rev := f.load(t, "r1")
	if rec.Status != kc.Running || rec.Approval.By == nil || *rec.Approval.By != "asha" || rec.Approval.At == nil || rec.Approval.PlanDigest != "SHA-256=plan" {
		t.Fatalf("after approve: status %s, approval %+v", rec.Status, rec.Approval)
	}
	stepEvent(t, f.published(t), "r1", "c", rev, 0)

	// Approving again before the step is verified publishes its event again.
	f.command(t, s, events.RunSubject("r1", events.VerbApprove), `{"by":"asha"}`)
	_, rev2 := f.load(t, "r1")
	stepEvent(t, f.published(t), "r1", "c", rev2, 0)
	if ids := f.auditIDs(t, "r1", "approved.again"); len(ids) != 1 {
		t.Fatalf("approved.again audit events %v", ids)
	}
	f.settled(t)
}

func TestRejectCancelsAndAsksForTheUndo(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.waiting(t, "r1")
	f.command(t, s, events.RunSubject("r1", events.VerbReject), `{"request_id":"rej-1"}`)
	rec, _ := f.load(t, "r1")
	if rec.Status != kc.Cancelled {
		t.Fatalf("after reject: status %s", rec.Status)
	}
	st, err := f.js.Stream(f.ctx, assets.StreamRuns)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := st.GetLastMsgForSubject(f.ctx, events.RunSubject("r1", events.VerbUndo))
	if err != nil {
		t.Fatalf("no undo command: %v", err)
	}
	ev, err := events.Decode(&nats.Msg{Subject: raw.Subject, Header: raw.Header, Data: raw.Data})
	if err != nil || ev.ID != "rej-1:undo" || ev.Type != events.TypeRunUndo {
		t.Fatalf("undo command %+v (%v), want one under rej-1:undo", ev, err)
	}
	f.nonePublished(t)
	// A reject of a run that waits for nothing is refused.
	f.command(t, s, events.RunSubject("r1", events.VerbReject), ``)
	if rej := f.rejections(t); len(rej) != 1 || !strings.Contains(rej[0].data.Reason, "not waiting") {
		t.Fatalf("rejections %+v", rej)
	}
}

func TestApprovalTimeoutHandsOver(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.waiting(t, "r1")
	f.observeAll(t, s)
	f.clock.Advance(24*time.Hour - time.Second)
	s.SweepOnce(f.ctx, false)
	if rec, _ := f.load(t, "r1"); rec.Status != kc.WaitingApproval {
		t.Fatalf("status %s before the approval timeout", rec.Status)
	}
	f.clock.Advance(time.Second)
	s.SweepOnce(f.ctx, false)
	f.handedOver(t, "r1", "c", "CAIRN_APPROVAL_TIMEOUT")
}

// A command whose every delivery failed until its durable's MaxDeliver is not lost: the
// server's advisory has the supervisor keep it in the run's record as waiting, then remove
// it from the stream.
func TestCommandPastMaxDeliverIsKept(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.create(t, "r1", func(r *kc.Record) { r.Status = kc.HandedOver })
	adv := make(chan *nats.Msg, 4)
	sub, err := f.nc.ChanSubscribe(CommandAdvisorySubject, adv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	seq := f.send(t, events.RunSubject("r1", "resume"), `{"request_id":"resume-7","after_fix":true}`)
	info, err := f.control.Info(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < info.Config.MaxDeliver; i++ { // every delivery fails
		if err := f.fetch(t).Nak(); err != nil {
			t.Fatal(err)
		}
	}
	// A pull consumer redelivers (and announces the limit) only when asked for more.
	if b, err := f.control.Fetch(1, jetstream.FetchMaxWait(2*time.Second)); err == nil {
		for range b.Messages() {
			t.Fatal("a delivery past MaxDeliver")
		}
	}
	var m *nats.Msg
	select {
	case m = <-adv:
	case <-time.After(30 * time.Second):
		t.Fatal("no max-deliveries advisory within 30s")
	}
	s.onCommandMaxDeliveries(f.ctx, m)
	rec, _ := f.load(t, "r1")
	w := rec.Waiting("resume-7")
	if w == nil || w.Verb != "resume" || string(w.Args) != `{"after_fix":true}` {
		t.Fatalf("waiting %+v, want the resume kept with its data", rec.Commands)
	}
	stream, err := f.js.Stream(f.ctx, assets.StreamRuns)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.GetMsg(f.ctx, seq); err == nil {
		t.Fatal("the command is still in the stream after it was kept in the record")
	}
}
