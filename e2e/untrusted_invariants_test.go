package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/devproc"
	job "github.com/cairnhq/cairn/internal/night"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
)

// forgedInvariant is a record that decodes (its sum is the unkeyed SHA-256 the code
// computes) but breaks an invariant every record Cairn writes keeps.
type forgedInvariant struct {
	runID  string
	change func(r *kc.Record)
}

var forgedInvariants = []forgedInvariant{
	// Waiting for approval with no approval, its progress long ago: the supervisor's sweep
	// read its approval's step once the approval timeout was over (at once), so every start
	// of the supervisor died on it.
	{"run-forged-waiting", func(r *kc.Record) {
		r.Status, r.Approval = kc.WaitingApproval, nil
		r.ProgressedAt, r.UpdatedAt = "2026-10-01T00:00:00Z", "2026-10-01T00:00:00Z"
	}},
	// A running run with no steps at all.
	{"run-forged-empty", func(r *kc.Record) { r.Pipeline, r.Steps = []string{}, map[string]*kc.Step{} }},
}

// The match service's user (deploy/nats/accounts.conf), which may write any run's record,
// writes records that decode but break the record's invariants, before the night starts:
// the supervisor keeps running, the night is started and finishes as the truth says, and
// each forged run is handed over by a note alone, its entry kept as it was written.
func TestUntrustedInvariants(t *testing.T) {
	t.Parallel()
	takeDeployNightSlot(t)
	d := newDeployNight(t)
	d.services(allBut("supervisor")...)
	sup := d.svcAs("supervisor")

	ctx, cancel := context.WithTimeout(context.Background(), runLimit)
	defer cancel()
	admin, err := kc.Open(ctx, d.js, assets.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	nc, _, err := d.connect("match")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	runs, err := js.KeyValue(ctx, assets.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	revs := map[string]uint64{}
	for _, f := range forgedInvariants {
		r := kc.New(f.runID, kc.StringParams(false, "warehouse", "zzz", "date", date), job.Pipeline.Names(), "2026-10-13T22:00:00Z")
		r.Epoch = admin.Epoch() // any record in the bucket shows it
		f.change(r)
		b, err := kc.Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		if revs[f.runID], err = runs.Put(ctx, f.runID, b); err != nil {
			t.Fatalf("the match user writing %s: %v", f.runID, err)
		}
	}
	for _, f := range forgedInvariants {
		note := waitNoteOf(t, d.js, f.runID, runLimit)
		if note.ID != f.runID+":handover:record" || note.Error == "" {
			t.Errorf("handover note of %s: %+v, want %s:handover:record naming the broken invariant", f.runID, note, f.runID)
		}
	}
	if supExited(sup) {
		t.Fatalf("the supervisor died of the forged records (log %s)", sup.Log)
	}
	d.startRun()
	d.waitRun("done", func(r *kc.Record) bool { return r.Status == kc.Done })
	d.assertTruth()
	if supExited(sup) {
		t.Fatalf("the supervisor died (log %s)", sup.Log)
	}
	for _, f := range forgedInvariants {
		e, err := runs.Get(ctx, f.runID)
		if err != nil || e.Revision() != revs[f.runID] {
			t.Errorf("the forged record of %s was written over (%v): the entry is a person's to inspect", f.runID, err)
		}
		if _, _, err := admin.Load(ctx, f.runID); !errors.Is(err, kc.ErrInvariant) {
			t.Errorf("loading %s: %v, want ErrInvariant", f.runID, err)
		}
	}
	// A restarted supervisor starts on the same forged records, and stays up.
	sup.Stop(20 * time.Second)
	sup = d.svcAs("supervisor")
	d.publish("cairn.runs."+forgedInvariants[0].runID+".reject", "")
	if !poll(runLimit, func() bool { return d.rejectedOf(ctx, forgedInvariants[0].runID) }) {
		t.Fatalf("the reject of %s was not rejected by the restarted supervisor (log %s)", forgedInvariants[0].runID, sup.Log)
	}
	if supExited(sup) {
		t.Fatalf("the restarted supervisor died of the forged records (log %s)", sup.Log)
	}
}

// The same records written under cairn dev (whose embedded server has no users): it stays
// up as it meets them, and so does a cairn dev started again on the same storage, which
// earlier died on them at every start; the night still finishes.
func TestUntrustedInvariantsDevRestart(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newLoggedNight(t)
	n.start()
	ctx, cancel := context.WithTimeout(context.Background(), runLimit)
	defer cancel()
	store, err := kc.Open(ctx, n.js, assets.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range forgedInvariants {
		r := kc.New(f.runID, kc.StringParams(false, "warehouse", "zzz", "date", date), job.Pipeline.Names(), "2026-10-13T22:00:00Z")
		r.Epoch = store.Epoch()
		f.change(r)
		b, err := kc.Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.KV().Put(ctx, f.runID, b); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range forgedInvariants {
		if note := waitNoteOf(t, n.js, f.runID, runLimit); note.ID != f.runID+":handover:record" {
			t.Errorf("handover note of %s: %+v", f.runID, note)
		}
	}
	if n.exited() {
		t.Fatalf("cairn dev died of the forged records (log %s)", n.dev.Log)
	}
	n.stop()
	n.start()
	n.startRun()
	n.waitStatus(runLimit, kc.Done)
	n.assertTruth()
	if n.exited() {
		t.Fatalf("cairn dev, started again, died (log %s)", n.dev.Log)
	}
}

func supExited(p *devproc.Proc) bool {
	return errors.Is(p.Signal(syscall.Signal(0)), os.ErrProcessDone)
}

// rejectedOf reports whether cairn.rejected holds a rejection of a command on runID.
func (d *deployNight) rejectedOf(ctx context.Context, runID string) bool {
	evs, err := events.ReadSubject(ctx, d.js, assets.StreamRejected, events.RejectedSubject)
	if err != nil {
		return false
	}
	for _, e := range evs {
		if e.Subject == runID {
			return true
		}
	}
	return false
}

// waitNoteOf watches cairn-handovers until runID's note appears.
func waitNoteOf(t *testing.T, js jetstream.JetStream, runID string, limit time.Duration) runner.HandoverNote {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	kv, err := js.KeyValue(ctx, assets.BucketHandovers)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.Watch(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	for e := range w.Updates() {
		if e == nil || e.Operation() != jetstream.KeyValuePut {
			continue
		}
		var note runner.HandoverNote
		if err := json.Unmarshal(e.Value(), &note); err != nil {
			t.Fatalf("handover note %s: %v", e.Value(), err)
		}
		return note
	}
	t.Fatalf("no handover note for %s within %s", runID, limit)
	return runner.HandoverNote{}
}
