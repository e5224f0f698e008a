package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// The operator's everyday commands: gen, start --wait (following the run through a wait for
// approval), approve, and cancel.
func TestCLIGenStartApproveCancel(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newNight(t, 0)
	other := t.TempDir()
	out, code := n.cli("gen", "--warehouse", "pnq", "--date", "2026-10-14", "--invoices", "20", "--mismatches", "3", "--seed", "2", "--out", other)
	if code != 0 || !strings.Contains(out, "generated 20 invoices") {
		t.Fatalf("cairn gen (exit %d):\n%s", code, out)
	}
	if docs, _ := filepath.Glob(filepath.Join(other, "inbox", "pnq", "2026-10-14", "*.txt")); len(docs) != 20 {
		t.Fatalf("cairn gen wrote %d documents, want 20", len(docs))
	}

	n.start(approvalEnv)
	cmd := exec.Command(cairnBin, "start", "--warehouse", warehouse, "--date", date, "--wait")
	cmd.Env = append(os.Environ(), "CAIRN_NATS_URL="+n.url, "CAIRN_DATA_DIR="+n.dir)
	var follow bytes.Buffer
	cmd.Stdout = &follow
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	n.waitStatus(runLimit, kc.WaitingApproval)
	if out, code := n.cli("approve", runID, "--by", "asha", "--seed", n.approver("asha")); code != 0 {
		t.Fatalf("cairn approve (exit %d):\n%s", code, out)
	}
	if err := <-waited; err != nil {
		t.Fatalf("cairn start --wait: %v\n%s", err, follow.String())
	}
	for _, want := range []string{"started " + runID, "step 7 of 8 (debit-notes)", "waiting_approval", "done"} {
		if !strings.Contains(follow.String(), want) {
			t.Errorf("cairn start --wait printed no %q:\n%s", want, follow.String())
		}
	}
	rec := n.waitStatus(runLimit, kc.Done)
	if rec.Approval == nil || rec.Approval.By == nil || *rec.Approval.By != "asha" {
		t.Errorf("approval %+v, want by asha", rec.Approval)
	}
	n.assertTruth()

	// A second run (the night's shadow run: the same night twice would be refused) waits too;
	// cancel stops it.
	n.publish(events.RunStartSubject, `{"run_id":"run-b","warehouse":"ldh","date":"2026-10-13","shadow":true}`)
	n.waitRunStatus("run-b", kc.WaitingApproval)
	if out, code := n.cli("cancel", "run-b"); code != 0 {
		t.Fatalf("cairn cancel (exit %d):\n%s", code, out)
	}
	n.waitRunStatus("run-b", kc.Cancelled)
	if _, code := n.cli("cancel", "run-b"); code == 0 {
		t.Error("cancelling a cancelled run exited 0")
	}
}

// cairn demo: the reference night with a real crash at ledger entry 24, resumed, every
// figure equal to the ground truth.
func TestDemo(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newNight(t, 0)
	out, code := n.cli("demo", "--dir", filepath.Join(n.dir, "demo"))
	if code != 0 || strings.Contains(out, "DIFFERS") || !strings.Contains(out, "the process died at entry 24 of post-ledger") ||
		!strings.Contains(out, "ledger rows                              40                     40             ok") {
		t.Fatalf("cairn demo (exit %d):\n%s", code, out)
	}
}
