package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

const approvalEnv = "CAIRN_APPROVAL_STEPS=debit-notes"

// waitingForApproval waits until the run waits on debit-notes' plan, with the books written
// and no debit note queued.
func (n *night) waitingForApproval() *kc.Record {
	n.t.Helper()
	rec := n.waitStatus(runLimit, kc.WaitingApproval, kc.Done, kc.HandedOver)
	if rec.Status != kc.WaitingApproval || rec.Approval == nil || rec.Approval.Step != "debit-notes" || rec.Approval.By != nil ||
		!strings.HasPrefix(rec.Approval.PlanDigest, "SHA-256=") || rec.Lease != nil || rec.Step("debit-notes").Status != kc.Pending {
		n.t.Fatalf("status %s, approval %+v, lease %+v; want waiting on debit-notes' plan", rec.Status, rec.Approval, rec.Lease)
	}
	if rows := n.scalar("ledger.db", `SELECT count(*) FROM ledger_entries`); rows != len(n.truth.Adjustments) {
		n.t.Errorf("ledger rows %d while waiting, want %d", rows, len(n.truth.Adjustments))
	}
	if mail := n.mailKeys(); len(mail) != 0 {
		n.t.Errorf("mail sent before the approval: %v", mail)
	}
	return rec
}

// Approval: the run waits, survives a restart of every service while waiting, and finishes
// after a plain `nats pub cairn.runs.RUN.approve ”`.
func TestApprovalByNatsPub(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newNight(t, 0)
	n.start(approvalEnv)
	n.startRun()
	before := n.waitingForApproval()

	n.dev.Stop(20 * time.Second)
	n.start(approvalEnv)
	if out, code := n.cli("status", runID); code != 0 || !strings.Contains(out, "not yet approved") || !strings.Contains(out, "asked for at "+before.Approval.Since) {
		t.Fatalf("cairn status after the restart (exit %d), want the wait since %q:\n%s", code, before.Approval.Since, out)
	}
	after := n.waitingForApproval()
	if after.Approval.PlanDigest != before.Approval.PlanDigest {
		t.Errorf("plan %s after the restart, was %s", after.Approval.PlanDigest, before.Approval.PlanDigest)
	}
	// The wait began once: a restart keeps when, so CAIRN_APPROVAL_TIMEOUT goes on counting.
	if before.Approval.Since == "" || after.Approval.Since != before.Approval.Since {
		t.Errorf("approval.since %q after the restart, was %q; want it kept", after.Approval.Since, before.Approval.Since)
	}

	// The approve names its approver by the registered key that signed it.
	n.publish(events.RunSubject(runID, events.VerbApprove), signedApprove(t, after, "asha", n.approver("asha")))
	rec := n.waitStatus(runLimit, kc.Done, kc.HandedOver)
	if rec.Status != kc.Done || rec.Approval.By == nil || *rec.Approval.By != "asha" || rec.Approval.PlanDigest != before.Approval.PlanDigest {
		t.Fatalf("status %s, approval %+v", rec.Status, rec.Approval)
	}
	n.assertTruth()
	if c := n.audit(); c["approval.requested"] != 1 || c["approved"] != 1 {
		t.Errorf("audit %v: want one approval requested and one approved", c)
	}
}

// A reject undoes the run: its books are reversed and nothing was mailed.
func TestApprovalRejectUndoes(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newNight(t, 0)
	n.start(approvalEnv)
	n.startRun()
	n.waitingForApproval()
	if out, code := n.cli("reject", runID); code != 0 {
		t.Fatalf("cairn reject exited %d:\n%s", code, out)
	}
	n.waitStatus(runLimit, kc.Undone)
	if sum := n.scalar("ledger.db", `SELECT coalesce(sum(amount_paise), 0) FROM ledger_entries`); sum != 0 {
		t.Errorf("ledger total %d after the reject, want 0", sum)
	}
	for _, l := range n.truth.StockLevelsBefore {
		var q int64
		if err := n.db("erp.db").QueryRow(`SELECT qty FROM stock_levels WHERE warehouse = ? AND sku = ?`, warehouse, l.SKU).Scan(&q); err != nil || q != l.Qty {
			t.Errorf("stock level %s: %d (%v), want %d", l.SKU, q, err, l.Qty)
		}
	}
	if mail := n.mailKeys(); len(mail) != 0 {
		t.Errorf("mail after a reject: %v, want none", mail)
	}
}
