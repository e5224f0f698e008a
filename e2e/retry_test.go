package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
)

// cli runs the cairn binary against the night's server and returns its standard output
// and exit code.
func (n *night) cli(args ...string) (string, int) {
	n.t.Helper()
	cmd := exec.Command(cairnBin, args...)
	cmd.Env = append(append(os.Environ(), "CAIRN_NATS_URL="+n.url, "CAIRN_DATA_DIR="+n.dir), n.cliEnv...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		n.t.Fatalf("cairn %v: %v", args, err)
	}
	if code != 0 {
		n.t.Logf("cairn %v exited %d: %s", args, code, errb.String())
	}
	return out.String(), code
}

// handoverNotes lists `cairn handovers --json`.
func (n *night) handoverNotes() []runner.HandoverNote {
	n.t.Helper()
	out, code := n.cli("handovers", "--json")
	if code != 0 {
		n.t.Fatalf("cairn handovers exited %d", code)
	}
	var notes []runner.HandoverNote
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var note runner.HandoverNote
		if err := json.Unmarshal(sc.Bytes(), &note); err != nil {
			n.t.Fatalf("cairn handovers --json line %q: %v", sc.Text(), err)
		}
		notes = append(notes, note)
	}
	return notes
}

// A write that fails temporarily every time: each attempt retries it in process (same key,
// no duplicate), the attempts come back with a delay, and after CAIRN_LOOP_GUARD attempts
// that made no progress (the first wrote the 10 rows: progress) the run is handed over. The
// note, with the 10 keys that stand read back from the ledger, is shown by `cairn handovers`
// and `cairn status`; once the cause is gone, `cairn resume` finishes the night.
func TestLoopGuardHandsOverAndResumeFinishes(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newNight(t, 0)
	n.start("CAIRN_FAULTS=post-ledger.lost-reply.10=error:temporary", "CAIRN_LOOP_GUARD=3")
	n.startRun()
	rec := n.waitStatus(runLimit, kc.HandedOver, kc.Done)
	st := rec.Step("post-ledger")
	if rec.Status != kc.HandedOver || st.Status != kc.Failed || st.LastError == nil || !strings.Contains(*st.LastError, "loop guard") {
		t.Fatalf("status %s, post-ledger %s (%v); want handed over by the loop guard", rec.Status, st.Status, st.LastError)
	}
	// Entry 10 was written, its reply lost: its intent has no outcome.
	if st.Effects == nil || st.Effects.IntentsOpen != 1 {
		t.Errorf("post-ledger handed over with effects %+v, want 1 intent open (entry 10)", st.Effects)
	}
	if rows := n.scalar("ledger.db", `SELECT count(*) FROM ledger_entries`); rows != 10 {
		t.Errorf("ledger rows %d, want 10: entry 10 landed once however often it was retried", rows)
	}
	c := n.audit()
	if c["step.failed"] != 3 || c["handover"] != 1 {
		t.Errorf("audit %v: want 3 failed attempts (the first with progress) and the handover on the fourth", c)
	}

	notes := n.handoverNotes()
	if len(notes) != 1 || notes[0].RunID != runID || notes[0].Step != "post-ledger" || notes[0].ID != *rec.Handover ||
		!strings.Contains(notes[0].Error, "temporary") || notes[0].Done.Keys != 10 || !strings.Contains(notes[0].NextAction, "cairn resume "+runID) {
		t.Fatalf("cairn handovers: %+v", notes)
	}
	if len(notes[0].Done.Steps) != 1 || notes[0].Done.Steps[0].Step != "post-ledger" || !notes[0].Done.Steps[0].ReadBack ||
		fmt.Sprint(notes[0].Done.Steps[0].Standing) != fmt.Sprint(n.ledgerKeys()) {
		t.Errorf("note done %+v, want post-ledger's keys read back: %v", notes[0].Done, n.ledgerKeys())
	}
	out, code := n.cli("status", runID)
	if code != 0 || !strings.Contains(out, notes[0].ID) || !strings.Contains(out, "handed_over") {
		t.Errorf("cairn status (exit %d):\n%s", code, out)
	} else if !strings.Contains(out, "1 write begun, not confirmed") {
		t.Errorf("cairn status does not show post-ledger's open intent:\n%s", out)
	} else {
		t.Logf("cairn status:\n%s", out)
	}
	for _, k := range n.ledgerKeys() { // exactly which keys stand
		if !strings.Contains(out, k) {
			t.Errorf("cairn status does not name the standing key %s:\n%s", k, out)
		}
	}

	// The cause goes away (the fault is not set any more); a person resumes the run.
	n.dev.Stop(20 * time.Second)
	n.start()
	if out, code := n.cli("resume", runID, "--wait"); code != 0 {
		t.Fatalf("cairn resume --wait exited %d:\n%s", code, out)
	}
	rec = n.waitStatus(runLimit, kc.Done)
	n.assertTruth()
	// The record says what each step read and ran under, and that nothing is left open.
	for _, name := range rec.Pipeline {
		s := rec.Step(name)
		if s.InputFingerprint == nil || s.Versions.Code == nil || *s.Versions.Code != codeVersion || (s.Effects != nil && s.Effects.IntentsOpen != 0) {
			t.Errorf("step %s: input_fingerprint %v, code %v, effects %+v", name, s.InputFingerprint, s.Versions.Code, s.Effects)
		}
	}
	if notes := n.handoverNotes(); len(notes) != 0 {
		t.Errorf("cairn handovers after the resume: %+v, want none", notes)
	}
	if _, code := n.cli("resume", runID); code == 0 {
		t.Error("cairn resume of a done run exited 0")
	}
}

// An error of unknown class stops the run at once (no retry) and hands it over; a resume
// finishes it.
func TestUnknownErrorHandsOverAtOnce(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newNight(t, 0)
	fault := "update-stock.before-write.5=error:unknown@once"
	n.start("CAIRN_FAULTS=" + fault)
	n.startRun()
	rec := n.waitStatus(runLimit, kc.HandedOver, kc.Done)
	st := rec.Step("update-stock")
	if rec.Status != kc.HandedOver || st.Status != kc.Failed || st.Attempts != 0 {
		t.Fatalf("status %s, update-stock %s after %d failed attempts; want handed over on the first", rec.Status, st.Status, st.Attempts)
	}
	if rows := n.scalar("erp.db", `SELECT count(*) FROM stock_adjustments`); rows != 4 {
		t.Errorf("stock adjustments %d, want the 4 made before the error", rows)
	}
	if c := n.audit(); c["step.failed"] != 0 {
		t.Errorf("audit %v: an unknown error is not retried", c)
	}
	if out, code := n.cli("resume", runID); code != 0 {
		t.Fatalf("cairn resume exited %d:\n%s", code, out)
	}
	n.waitStatus(runLimit, kc.Done)
	n.assertTruth()
}

// ledgerKeys are the keys in the ledger, in key order.
func (n *night) ledgerKeys() []string {
	n.t.Helper()
	rows, err := n.db("ledger.db").Query(`SELECT key FROM ledger_entries ORDER BY key`)
	if err != nil {
		n.t.Fatal(err)
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			n.t.Fatal(err)
		}
		keys = append(keys, k)
	}
	return keys
}
