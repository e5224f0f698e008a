package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnhq/cairn/internal/books"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// cairn rerun RUN --from STEP runs a finished night again from a step: the earlier steps'
// outputs are kept, every effect already made stands once (the keys make the repeated
// writes harmless), and the checkpoint records the rerun as generation 1.
func TestRerunFromPostLedger(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newNight(t, 0)
	n.start()
	n.startRun()
	before := n.waitStatus(runLimit, kc.Done)
	if out, code := n.cli("rerun", runID, "--from", "post-ledger", "--wait"); code != 0 {
		t.Fatalf("cairn rerun exited %d:\n%s", code, out)
	}
	rec := n.waitRecord(runLimit, "generation 1 done", func(r *kc.Record) bool { return r.Generation == 1 && r.Status == kc.Done })
	for _, s := range []string{"fetch", "extract", "match", "compare"} {
		if rec.Step(s).Output.Digest != before.Step(s).Output.Digest || *rec.Step(s).Token != *before.Step(s).Token {
			t.Errorf("step %s changed in the rerun: %+v, was %+v", s, rec.Step(s), before.Step(s))
		}
	}
	if rec.Step("post-ledger").Effects == nil || rec.Step("post-ledger").Effects.Keys != 0 {
		t.Errorf("post-ledger's rerun wrote %+v keys, want none (every entry stands unchanged)", rec.Step("post-ledger").Effects)
	}
	// Everything stands once; the rerun's report is the one new message.
	files := n.mailKeys()
	n.assertTruthExtra(1)
	if len(files) != len(n.truth.DebitNotes)+2 || !contains(strings.Join(files, " "), runID+":report:g1") {
		t.Errorf("mail after the rerun: %v", files)
	}
	if rows := n.scalar("ledger.db", `SELECT count(*) FROM ledger_entries`); rows != len(n.truth.Adjustments) {
		t.Errorf("ledger rows %d after the rerun, want %d", rows, len(n.truth.Adjustments))
	}
	if c := n.audit(); c["run.rerun"] != 1 || c["extractor.called"] != 312 {
		t.Errorf("audit %v: want one run.rerun and no extractor call repeated", c)
	}
}

// cairn resume --where acts on every matching run and says what it did, run by run. The
// two runs have inputs of their own (the night, and its shadow run): a second run of the
// same input would be refused at its start.
func TestBulkResumeWhere(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newNight(t, 0)
	n.start("CAIRN_FAULTS=update-stock.before-write.5=error:unknown")
	runs := []string{"run-a", "run-b"}
	for i, r := range runs {
		n.publish(events.RunStartSubject, fmt.Sprintf(`{"run_id":%q,"warehouse":%q,"date":%q,"shadow":%t}`, r, warehouse, date, i == 1))
	}
	for _, r := range runs {
		n.waitRunStatus(r, kc.HandedOver)
	}
	n.dev.Stop(20 * time.Second)
	n.start()
	out, code := n.cli("resume", "--where", "status=nothing_like_this", "--yes")
	if code != 0 || !strings.Contains(out, "no run matches") {
		t.Errorf("a query matching nothing: exit %d\n%s", code, out)
	}
	out, code = n.cli("resume", "--where", "status=handed_over,step=update-stock", "--yes")
	if code != 0 {
		t.Fatalf("cairn resume --where exited %d:\n%s", code, out)
	}
	for _, r := range runs {
		if !strings.Contains(out, "resume "+r+": "+r) {
			t.Errorf("output does not report %s:\n%s", r, out)
		}
		n.waitRunStatus(r, kc.Done)
	}
	for _, table := range []string{"ledger_entries", "shadow_ledger_entries"} {
		if rows := n.scalar("ledger.db", `SELECT count(*) FROM `+table); rows != len(n.truth.Adjustments) {
			t.Errorf("%s: %d rows, want %d, once each", table, rows, len(n.truth.Adjustments))
		}
	}
	for _, table := range []string{"stock_adjustments", "shadow_stock_adjustments"} {
		if rows := n.scalar("erp.db", `SELECT count(*) FROM `+table); rows != len(n.truth.Adjustments) {
			t.Errorf("%s: %d rows, want %d, once each", table, rows, len(n.truth.Adjustments))
		}
	}
}

// waitRunStatus waits until the run's record shows status.
func (n *night) waitRunStatus(run string, status kc.Status) {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runLimit)
	defer cancel()
	kv, err := n.js.KeyValue(ctx, assets.BucketRuns)
	if err != nil {
		n.t.Fatal(err)
	}
	w, err := kv.Watch(ctx, run)
	if err != nil {
		n.t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	for e := range w.Updates() {
		if e == nil {
			continue
		}
		if r, err := kc.Decode(e.Value()); err == nil && r.Status == status {
			return
		}
	}
	n.t.Fatalf("run %s not %s within %s", run, status, runLimit)
}

// A fence of another epoch (the NATS storage was replaced while the ledger stayed) hands the
// run over; after a person checked, cairn fences adopt moves it over and a resume finishes.
func TestForeignEpochAdopted(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newNight(t, 0)
	db, err := books.Open(context.Background(), "sqlite:"+filepath.Join(n.dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	n.start()
	if _, err := n.db("ledger.db").Exec(`INSERT INTO fences(run_id, epoch, token) VALUES (?, 'lost-storage', 99999)`, runID); err != nil {
		t.Fatal(err)
	}
	n.startRun()
	rec := n.waitStatus(runLimit, kc.HandedOver, kc.Done)
	if rec.Status != kc.HandedOver || rec.Step("post-ledger").LastError == nil || !strings.Contains(*rec.Step("post-ledger").LastError, "foreign epoch") {
		t.Fatalf("status %s, post-ledger %+v; want handed over for a foreign epoch", rec.Status, rec.Step("post-ledger"))
	}
	if rows := n.scalar("ledger.db", `SELECT count(*) FROM ledger_entries`); rows != 0 {
		t.Fatalf("%d ledger rows written under a foreign fence", rows)
	}
	if out, code := n.cli("fences", "adopt", runID); code != 0 || !strings.Contains(out, "next: cairn resume") {
		t.Fatalf("cairn fences adopt (exit %d):\n%s", code, out)
	}
	if out, code := n.cli("resume", runID, "--wait"); code != 0 {
		t.Fatalf("cairn resume (exit %d):\n%s", code, out)
	}
	n.assertTruth()
}
