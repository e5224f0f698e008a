package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cairnhq/cairn/examples/enrich"
	"github.com/cairnhq/cairn/examples/enrich/stubapi"
	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// undo asks for undo request id of runID: of the records where selects (nil: the whole
// run).
func (j *job) undo(runID, id string, where map[string]string) {
	j.t.Helper()
	var cmd events.Command
	if where != nil {
		cmd.Scope = &events.UndoScope{Where: where}
	}
	if err := app.Command(j.t.Context(), j.js, enrich.Pipeline.Name, runID, events.VerbUndo, id, cmd); err != nil {
		j.t.Fatal(err)
	}
}

// settled waits for undo request id of runID to end with the run at status: its lease
// released.
func (j *job) settled(runID, id string, status kc.Status) *kc.Record {
	j.t.Helper()
	store := j.store()
	ctx, cancel := context.WithTimeout(j.t.Context(), 2*time.Minute)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last *kc.Record
	for {
		rec, _, err := store.Load(ctx, runID)
		if err == nil {
			last = rec
			if rec.Undo != nil && rec.Undo.RequestID == kc.RequestKey(id) && rec.Status == status && rec.Lease == nil {
				return rec
			}
		}
		select {
		case <-ctx.Done():
			b, _ := os.ReadFile(filepath.Join(j.dir, "services-"+runID+".log"))
			j.t.Fatalf("undo %s of %s never settled as %s: last record %+v (undo %+v, lease %+v), %v\nservices' log:\n%s", id, runID, status, last, last.Undo, last.Lease, err, tail(b, 6000))
		case <-tick.C:
		}
	}
}

// reversed is the record ids of the upload system's reversed uploads of runID, sorted,
// and how many uploads it holds of the run.
func (j *job) reversed(runID string) (ids []string, rows int) {
	j.t.Helper()
	all, err := j.apis.Rows(j.t.Context(), runID)
	if err != nil {
		j.t.Fatal(err)
	}
	for _, r := range all {
		if r.Reversed {
			ids = append(ids, r.RecordID)
		}
	}
	slices.Sort(ids)
	return ids, len(all)
}

// uploadedIDs is the record ids the upload system holds of runID, sorted.
func (j *job) uploadedIDs(runID string) []string {
	j.t.Helper()
	all, err := j.apis.Rows(j.t.Context(), runID)
	if err != nil {
		j.t.Fatal(err)
	}
	var ids []string
	for _, r := range all {
		ids = append(ids, r.RecordID)
	}
	slices.Sort(ids)
	return ids
}

// An undo of a done run through the upload system's reversal: a scoped undo of two records
// (--where record=<id>, one request each) reverses those two uploads alone, the run back at
// done; a whole undo reverses the rest, the two found reversed already, and the run ends
// undone; every upload reversed exactly once, its row kept and marked reversed.
func TestUndoReversesUploads(t *testing.T) {
	t.Parallel()
	j := newJob(t, 10, stubapi.Config{})
	const run = "run-undo"
	j.checkOnce(j.run(run), nil)
	ids := j.uploadedIDs(run)
	if len(ids) < 3 {
		t.Fatalf("%d uploads, want at least 3", len(ids))
	}
	if got := j.apis.Counts(); got.Reversed != 0 {
		t.Fatalf("%d uploads reversed before any undo", got.Reversed)
	}
	chosen := []string{ids[0], ids[len(ids)-1]}
	for i, id := range chosen {
		req := "undo-" + id
		j.undo(run, req, map[string]string{"record": id})
		rec := j.settled(run, req, kc.Done)
		if rec.Undo.Total != 1 || rec.Undo.Reversed != 1 || rec.Undo.Cursor != 1 {
			t.Errorf("undo of record %s: %+v, want 1 of 1 reversed", id, rec.Undo)
		}
		if got, _ := j.reversed(run); !slices.Equal(got, chosen[:i+1]) {
			t.Errorf("after the undo of record %s the upload system shows %v reversed, want %v", id, got, chosen[:i+1])
		}
	}
	j.undo(run, "undo-all", nil)
	rec := j.settled(run, "undo-all", kc.Undone)
	if rec.Undo.Total != len(ids) || rec.Undo.Reversed != len(ids)-2 || rec.Undo.Cursor != len(ids) {
		t.Errorf("whole undo: %+v, want %d effects, %d newly reversed", rec.Undo, len(ids), len(ids)-2)
	}
	got, rows := j.reversed(run)
	if !slices.Equal(got, ids) || rows != len(ids) {
		t.Errorf("after the whole undo: %v reversed of %d rows, want every upload %v", got, rows, ids)
	}
	c := j.apis.Counts()
	// Each reversal was asked once, the two scoped ones once more by the whole undo (their
	// stored answers replayed); the upload counts are the run's, unchanged.
	if c.Reversed != len(ids) || c.Calls[stubapi.APIReversal] != len(ids)+2 || c.Uploads != len(ids) || c.Duplicates != 0 {
		t.Errorf("counts: %d reversed in %d reversal calls, %d uploads (%d duplicates); want %d reversed in %d calls, %d uploads",
			c.Reversed, c.Calls[stubapi.APIReversal], c.Uploads, c.Duplicates, len(ids), len(ids)+2, len(ids))
	}
}

// The compensator's process killed (kill -9, a crash point that exits) after its third
// reversal, before its cursor moved: the next process resumes the undo from the cursor, the
// third reversal asked again and found made; the run ends undone, each upload reversed once.
func TestUndoKilledMidway(t *testing.T) {
	t.Parallel()
	j := newJob(t, 10, stubapi.Config{})
	const run = "run-undo-kill"
	j.checkOnce(j.run(run, "CAIRN_FAULTS=undo.after-write.3=exit@once"), nil)
	ids := j.uploadedIDs(run)
	if len(ids) < 4 {
		t.Fatalf("%d uploads, want at least 4", len(ids))
	}
	before := j.fleet.Restarts()
	j.undo(run, "undo-all", nil)
	rec := j.settled(run, "undo-all", kc.Undone)
	if j.fleet.Restarts() <= before {
		t.Errorf("the fault undo.after-write.3 killed no process (%d restarts)", j.fleet.Restarts())
	}
	got, rows := j.reversed(run)
	if !slices.Equal(got, ids) || rows != len(ids) {
		t.Errorf("after the undo: %v reversed of %d rows, want every upload %v", got, rows, ids)
	}
	c := j.apis.Counts()
	if c.Reversed != len(ids) || c.Uploads != len(ids) || c.Calls[stubapi.APIReversal] != len(ids)+1 {
		t.Errorf("counts: %d reversed in %d reversal calls, %d uploads; want %d reversed in %d calls (the third asked again), %d uploads",
			c.Reversed, c.Calls[stubapi.APIReversal], c.Uploads, len(ids), len(ids)+1, len(ids))
	}
	if rec.Undo.Total != len(ids) || rec.Undo.Cursor != len(ids) || rec.Undo.Reversed != len(ids)-1 {
		t.Errorf("undo %+v: want %d of %d, the third's repeat found made", rec.Undo, len(ids)-1, len(ids))
	}
}
