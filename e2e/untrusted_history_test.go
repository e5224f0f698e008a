package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	job "github.com/cairnhq/cairn/internal/night"
	"github.com/cairnhq/cairn/internal/stepevent"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
)

// Issue 38, high 1: an old signed revision written back. With match's own user of
// deploy/nats/accounts.conf and no seed, the run's first revision is put back after an
// operator's cancel, and match's event published: before records were chained the run went
// on and finished (ledger rows, mails). Now every reader refuses the record (its prev is not
// the revision it was written over), the run is handed over by its note naming it, and
// nothing is written anywhere.
func TestUntrustedRolledBackRecord(t *testing.T) {
	t.Parallel()
	takeDeployNightSlot(t)
	d := newDeployNight(t)
	d.services(allBut(job.PostLedger)...) // the run waits at post-ledger, where it is cancelled
	d.startRun()
	d.waitRun("compare verified", func(r *kc.Record) bool { return r.Step(job.Compare).Status == kc.Verified })
	d.publish(events.RunSubject(runID, events.VerbCancel), `{}`)
	d.waitRun("cancelled", func(r *kc.Record) bool { return r.Status == kc.Cancelled })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The first revision, as any reader of the bucket may read it.
	adminRuns, err := d.js.KeyValue(ctx, assets.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	hist, err := adminRuns.History(ctx, runID)
	if err != nil || len(hist) < 2 {
		t.Fatalf("the run's history: %d revisions, %v", len(hist), err)
	}
	first := hist[0]
	if rec, err := kc.Decode(first.Value()); err != nil || rec.Status != kc.Running || rec.Step(job.Fetch).Status != kc.Pending {
		t.Fatalf("the run's first revision %d: %+v, %v", first.Revision(), rec, err)
	}

	mjs, runs := d.runsAs(ctx, job.Match)
	rev, err := runs.Put(ctx, runID, first.Value())
	if err != nil {
		t.Fatalf("putting the first revision back as match: %v", err)
	}
	if err := stepevent.Publish(ctx, mjs, assets.Default, "/cairn/match", runID, job.Match, 0, rev, time.Now()); err != nil {
		t.Fatalf("publishing match's event as match: %v", err)
	}
	d.services(job.PostLedger)

	handovers, err := d.js.KeyValue(ctx, assets.BucketHandovers)
	if err != nil {
		t.Fatal(err)
	}
	var note runner.HandoverNote
	if !poll(time.Minute, func() bool {
		he, err := handovers.Get(ctx, runID)
		return err == nil && json.Unmarshal(he.Value(), &note) == nil && note.ID == runID+":handover:record"
	}) {
		t.Fatalf("no handover note for the rolled-back record within a minute (note %+v): it was acted on", note)
	}
	if !strings.Contains(note.Error, kc.ErrRolledBack.Error()) {
		t.Errorf("handover note error %q: want it to name the rolled-back record", note.Error)
	}
	latest, err := adminRuns.Get(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	if latest.Revision() != rev {
		t.Fatalf("the rolled-back record (revision %d) was written over (revision %d): it was acted on", rev, latest.Revision())
	}
	var rows int
	if err := d.db("ledger.db").QueryRow(`SELECT count(*) FROM ledger_entries WHERE run_id = ?`, runID).Scan(&rows); err != nil && !strings.Contains(err.Error(), "no such table") {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Fatalf("%d ledger rows after the cancel and the rolled-back record, want none", rows)
	}
	if keys := d.mailKeys(); len(keys) != 0 {
		t.Fatalf("mails after the cancel and the rolled-back record: %v, want none", keys)
	}
	d.assertNoneRefused()
}

// forgeAs writes edit of the run's latest record as service name would: its own user of
// deploy/nats/accounts.conf, its own seed, written over the latest revision (so the record's
// history holds). It returns the revision written and the record before it.
func (d *deployNight) forgeAs(ctx context.Context, name string, edit func(r *kc.Record)) (uint64, *kc.Record) {
	d.t.Helper()
	_, runs := d.runsAs(ctx, name)
	e, err := runs.Get(ctx, runID)
	if err != nil {
		d.t.Fatal(err)
	}
	before, err := kc.Decode(e.Value())
	if err != nil {
		d.t.Fatal(err)
	}
	rec := before.Clone()
	edit(rec)
	rec.Prev = e.Revision()
	raw, err := kc.EncodeSigned(rec, d.signer(name))
	if err != nil {
		d.t.Fatal(err)
	}
	rev, err := runs.Update(ctx, runID, raw, e.Revision())
	if err != nil {
		d.t.Fatalf("writing the forged record as %s: %v", name, err)
	}
	return rev, before
}

// Issue 38, high 2: a lease holder wrote an approval. With match's user and match's own seed,
// a run waiting for a person's approval of debit-notes' plan is given approval.by "cfo" and a
// lease for match: before, the supervisor took over the dead lease, signed the record again,
// and the run mailed its debit notes with no approval. Now the approval carries no approver's
// signature: no reader takes the record, the run is handed over by its note, nothing is mailed.
func TestUntrustedLeaseHolderWritesAnApproval(t *testing.T) {
	t.Parallel()
	takeDeployNightSlot(t)
	d := newDeployNight(t)
	for _, s := range allBut() {
		d.svcAs(s, approvalEnv)
	}
	d.startRun()
	d.waitRun("waiting for approval", func(r *kc.Record) bool { return r.Status == kc.WaitingApproval })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rev, _ := d.forgeAs(ctx, job.Match, func(r *kc.Record) {
		by, at := "cfo", time.Now().UTC().Format(time.RFC3339)
		r.Approval.By, r.Approval.At = &by, &at
		r.Lease = &kc.Lease{Owner: "match/forged", OwnerInbox: "cairn.owner.match.forged", Token: 1, Step: job.Match, WriteID: "forged"}
	})
	note := d.waitNote(ctx, func(n runner.HandoverNote) bool { return strings.HasPrefix(n.ID, runID+":handover:") })
	if !strings.Contains(note.Error, "approval") {
		t.Errorf("handover note %q: %q, want it to name the approval", note.ID, note.Error)
	}
	latest, err := d.runsKV(ctx).Get(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	if latest.Revision() != rev {
		if rec, err := kc.Decode(latest.Value()); err != nil || rec.Status != kc.HandedOver || rec.Approval == nil || rec.Approval.By != nil {
			t.Fatalf("the forged approval (revision %d) was acted on: revision %d is %+v (%v)", rev, latest.Revision(), rec, err)
		}
	}
	if keys := d.mailKeys(); len(keys) != 0 {
		t.Fatalf("mails after a forged approval: %v, want none", keys)
	}
	d.assertNoneRefused()
}

// Issue 38, high 2: a lease holder rewrote another step's output. With match's user and
// seed, match's lease is taken and, in the same write, extract's verified output replaced by
// another with a digest that holds: before, later steps used it and wrote wrong amounts under
// valid keys. Now the supervisor, which judges every write against the one before it, puts
// the record before the write back, handed over with a note naming what match changed, and
// nothing is written outside.
func TestUntrustedLeaseHolderRewritesAnotherStepsOutput(t *testing.T) {
	t.Parallel()
	takeDeployNightSlot(t)
	d := newDeployNight(t)
	d.services(allBut(job.Match)...) // the run waits for match, whose lease the attacker takes
	d.startRun()
	d.waitRun("extract verified", func(r *kc.Record) bool { return r.Step(job.Extract).Status == kc.Verified })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	forged := []byte(`{"invoices":[]}`)
	sum := sha256.Sum256(forged)
	rev, before := d.forgeAs(ctx, job.Match, func(r *kc.Record) {
		r.Lease = &kc.Lease{Owner: "match/forged", OwnerInbox: "cairn.owner.match.forged", Token: 1, Step: job.Match, WriteID: "forged"}
		r.Step(job.Match).Status = kc.InProgress
		r.Step(job.Extract).Output = &kc.Output{Inline: forged, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(forged))}
	})
	note := d.waitNote(ctx, func(n runner.HandoverNote) bool { return strings.Contains(n.ID, ":handover:overreach:") })
	if !strings.Contains(note.Error, "step extract's work") || !strings.Contains(note.Error, job.Match) {
		t.Errorf("handover note %q: %q, want it to name match and extract's work", note.ID, note.Error)
	}
	var rec *kc.Record
	if !poll(time.Minute, func() bool {
		e, err := d.runsKV(ctx).Get(ctx, runID)
		if err != nil || e.Revision() == rev {
			return false
		}
		rec, err = kc.Decode(e.Value())
		return err == nil && rec.Status == kc.HandedOver
	}) {
		t.Fatalf("the forged record (revision %d) was not put back within a minute: %+v", rev, rec)
	}
	if got, want := rec.Step(job.Extract).Output.Digest, before.Step(job.Extract).Output.Digest; got != want || rec.Lease != nil || rec.Sig == nil || rec.Sig.By != "supervisor" {
		t.Fatalf("put back: extract's output %s (want %s), lease %+v, signed by %+v; want the record before the write, handed over by the supervisor", got, want, rec.Lease, rec.Sig)
	}
	var rows int
	if err := d.db("ledger.db").QueryRow(`SELECT count(*) FROM ledger_entries WHERE run_id = ?`, runID).Scan(&rows); err != nil && !strings.Contains(err.Error(), "no such table") {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Fatalf("%d ledger rows after the overreaching write, want none", rows)
	}
	d.assertNoneRefused()
}

// runsAs connects as service name's own user of deploy/nats/accounts.conf (closed when the
// test ends) and returns its JetStream and the checkpoint bucket as that user sees it.
func (d *deployNight) runsAs(ctx context.Context, name string) (jetstream.JetStream, jetstream.KeyValue) {
	d.t.Helper()
	nc, _, err := d.connect(name)
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		d.t.Fatal(err)
	}
	runs, err := js.KeyValue(ctx, assets.BucketRuns)
	if err != nil {
		d.t.Fatal(err)
	}
	return js, runs
}

// runsKV is the checkpoint bucket, as admin reads it.
func (d *deployNight) runsKV(ctx context.Context) jetstream.KeyValue {
	d.t.Helper()
	kv, err := d.js.KeyValue(ctx, assets.BucketRuns)
	if err != nil {
		d.t.Fatal(err)
	}
	return kv
}

// waitNote waits up to a minute for the run's handover note that ok accepts.
func (d *deployNight) waitNote(ctx context.Context, ok func(runner.HandoverNote) bool) runner.HandoverNote {
	d.t.Helper()
	handovers, err := d.js.KeyValue(ctx, assets.BucketHandovers)
	if err != nil {
		d.t.Fatal(err)
	}
	var note runner.HandoverNote
	if !poll(time.Minute, func() bool {
		he, err := handovers.Get(ctx, runID)
		return err == nil && json.Unmarshal(he.Value(), &note) == nil && ok(note)
	}) {
		d.t.Fatalf("no handover note within a minute (last %+v)", note)
	}
	return note
}
