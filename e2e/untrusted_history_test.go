package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	job "github.com/cairnhq/cairn/internal/night"
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

	mc, _, err := d.connect("match")
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	mjs, err := jetstream.New(mc)
	if err != nil {
		t.Fatal(err)
	}
	runs, err := mjs.KeyValue(ctx, assets.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := runs.Put(ctx, runID, first.Value())
	if err != nil {
		t.Fatalf("putting the first revision back as match: %v", err)
	}
	if err := runner.PublishStep(ctx, mjs, assets.Default, "/cairn/match", runID, job.Match, 0, rev, time.Now()); err != nil {
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
