package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnhq/cairn/internal/undo"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/faults"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
)

// The compensator panics during every undo while it holds the undo's lease (a bug in a
// reversal, injected as undo.before-write.1=panic): the undo is handed over to a person, its
// note naming the panic, the lease released and the cursor kept; it is not sent again to
// panic again (before, the sweep republished it once its lease expired, for ever, and the
// run stayed undoing).
func TestUndoPanicHandsOver(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newNight(t, 0)
	n.start("CAIRN_FAULTS=undo.before-write.1=panic")
	n.startRun()
	n.waitStatus(runLimit, kc.Done)
	n.publish(fmt.Sprintf("cairn.runs.%s.undo", runID), `{}`)

	// Seconds after the undo starts; a looping undo never gets there.
	rec := n.waitRecord(2*time.Minute, "the undo handed over", func(r *kc.Record) bool { return r.Status == kc.HandedOver })
	want := runID + ":handover:undo:panic"
	if rec.Lease != nil || rec.Handover == nil || *rec.Handover != want || rec.Undo == nil || rec.Undo.Cursor != 0 {
		t.Errorf("record: lease %+v, handover %v, undo %+v; want no lease, handover %s, the undo at cursor 0", rec.Lease, rec.Handover, rec.Undo, want)
	}
	if !strings.Contains(rec.NextAction, "cairn undo "+runID) {
		t.Errorf("next action %q: want it to say a person undoes again", rec.NextAction)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	notes, err := n.js.KeyValue(ctx, assets.BucketHandovers)
	if err != nil {
		t.Fatal(err)
	}
	e, err := notes.Get(ctx, runID)
	if err != nil {
		t.Fatalf("the handover note: %v", err)
	}
	var note runner.HandoverNote
	if err := json.Unmarshal(e.Value(), &note); err != nil {
		t.Fatal(err)
	}
	if note.ID != want || note.Step != undo.Step || !strings.Contains(note.Error, "panicked") || !strings.Contains(note.Error, "injected panic") {
		t.Errorf("note %+v: want %s, step undo, naming the injected panic", note, want)
	}
	// Once: one start of the undo, one handover in the run's audit, one rejection of the command.
	counts := n.audit()
	if counts["undo.started"] != 1 || counts["undo.handover"] != 1 {
		t.Errorf("audit %v: want one undo.started and one undo.handover", counts)
	}
	if rej := n.rejectionsOf(ctx, runID); len(rej) != 1 || !strings.Contains(rej[0].Reason, "injected panic") {
		t.Errorf("rejections %+v: want the undo command's, naming the panic", rej)
	}
	// A person sees it: cairn status shows the note.
	if out, code := n.cli("status", runID); code != 0 || !strings.Contains(out, "handed_over") || !strings.Contains(out, "panicked") {
		t.Errorf("cairn status exited %d:\n%s", code, out)
	}
}

// An undo that panics while it waits in the record for the run's lease (post-ledger stalls
// holding it; the panic injected right after the compensator wrote the wait): the wait is
// taken out of the record, which names the panic and the note, so the supervisor's sweep
// does not send the undo again to panic again; the run stays cancelled for a person.
func TestUndoPanicWhileWaiting(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newNight(t, 0)
	stall := "post-ledger.before-write.10=stall:30s@once"
	n.start("CAIRN_FAULTS="+stall+",undo.after-record=panic", "CAIRN_LEASE=90s", "CAIRN_ACK_WAIT=90s")
	n.startRun()
	if !poll(runLimit, func() bool { return faults.Fired(filepath.Join(n.dir, "faults"), stall) }) {
		t.Fatalf("%s did not fire", stall)
	}
	n.publish(fmt.Sprintf("cairn.runs.%s.undo", runID), `{}`)
	want := runID + ":handover:undo:panic"
	rec := n.waitRecord(time.Minute, "the waiting undo handed over", func(r *kc.Record) bool { return r.Handover != nil && *r.Handover == want })
	if rec.Status != kc.Cancelled || len(rec.Commands) != 0 || rec.Undo != nil || !strings.Contains(rec.NextAction, "cairn undo "+runID) {
		t.Errorf("record: status %s, waiting %+v, undo %+v, next action %q; want cancelled, no wait, no undo, a person to undo again",
			rec.Status, rec.Commands, rec.Undo, rec.NextAction)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if rej := n.rejectionsOf(ctx, runID); len(rej) != 1 || !strings.Contains(rej[0].Reason, "injected panic") {
		t.Errorf("rejections %+v: want the undo command's, naming the panic", rej)
	}
	if c := n.audit(); c["undo.handover"] != 1 || c["undo.started"] != 0 {
		t.Errorf("audit %v: want one undo.handover and no undo started", c)
	}
}

// rejectionsOf lists the refusals on cairn.rejected of run's messages.
func (n *night) rejectionsOf(ctx context.Context, run string) []events.Rejected {
	n.t.Helper()
	evs, err := events.ReadSubject(ctx, n.js, assets.StreamRejected, events.RejectedSubject)
	if err != nil {
		n.t.Fatal(err)
	}
	var out []events.Rejected
	for _, e := range evs {
		var r events.Rejected
		if e.Unmarshal(&r) == nil && e.Subject == run {
			out = append(out, r)
		}
	}
	return out
}

// cairn start --wait follows a run whose record then breaks an invariant (waiting for
// approval with no approval, written by admin): it reports the record damaged and why, and
// exits 3, instead of following it for ever; cairn status says the same.
func TestCLIWaitDamagedRecord(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	h := newProcsNight(t)
	h.svc("supervisor") // no step runs: the run stays at its first step

	cmd := exec.Command(cairnBin, "start", "--warehouse", warehouse, "--date", date, "--wait")
	cmd.Env = h.env()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	h.waitRecord(time.Minute, "the run started", func(r *kc.Record) bool { return r.Status == kc.Running })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kv, err := h.js.KeyValue(ctx, assets.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	r, err := kc.Decode(e.Value())
	if err != nil {
		t.Fatal(err)
	}
	r.Status, r.Approval, r.Sig = kc.WaitingApproval, nil, nil
	b, err := kc.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Update(ctx, runID, b, e.Revision()); err != nil {
		t.Fatal(err)
	}

	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3 {
			t.Errorf("cairn start --wait ended with %v, want exit 3", err)
		}
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-exited // its output is the test's to read only once it has ended
		t.Fatalf("cairn start --wait still follows the damaged record after a minute:\n%s", out.String())
	}
	if s := errb.String(); !strings.Contains(s, "damaged") || !strings.Contains(s, "no approval") {
		t.Errorf("cairn start --wait said:\n%s\nwant the record damaged, naming the missing approval", s)
	}
	status, code := h.cli("status", runID)
	if code != 3 || !strings.Contains(status, "damaged") || !strings.Contains(status, "no approval") {
		t.Errorf("cairn status exited %d:\n%s\nwant 3, the record damaged and why", code, status)
	}
}
