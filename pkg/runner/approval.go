package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// approvalGate is the two phases of a step that waits for a person (DESIGN.md, "Approval").
// Without an approval of this step it plans: the plan is stored, and in one compare-and-set
// the run waits (status waiting_approval, approval {step, plan_digest, since}), the step is pending
// again and the lease released; the message is acked. With an approval it goes on only
// while a fresh plan has the approved digest; a plan that changed hands the run over.
//
// unclear, when not empty, says why the run's evidence is unclear before a step that cannot
// be undone (unclearEvidence). A step configured to wait (Config.Approval) says so in its
// wait; any other step waits on the evidence itself: its plan is the evidence, so a person's
// approval of it lets this step and every later step that finds the same evidence go on, and
// evidence that changed since asks again.
func (r *Runner) approvalGate(ctx context.Context, a *Attempt, h *kc.Holder, unclear string) (settle settleFunc, wait bool) {
	plan, err := evidencePlan(unclear)
	if r.cfg.Approval {
		plan, err = r.hooks.planner.Plan(ctx, a)
	}
	if err != nil {
		return r.fail(ctx, a, h, fmt.Errorf("planning: %w", err)), true
	}
	out, err := r.cfg.Artifacts.Save(ctx, a.RunID, a.Step, plan)
	if err != nil {
		return r.fail(ctx, a, h, Temporary(fmt.Errorf("storing the plan: %w", err))), true
	}
	cur, _ := h.Record()
	switch ap := cur.Approval; {
	case ap == nil || ap.By == nil:
	case r.cfg.Approval && ap.Step == a.Step:
		if ap.PlanDigest != out.Digest {
			return r.handover(ctx, a, h, fmt.Errorf("the plan of %s changed since it was approved (approved %s, now %s): approve the new plan or rerun", a.Step, ap.PlanDigest, out.Digest)), true
		}
		return nil, false
	case !r.cfg.Approval && ap.PlanDigest == out.Digest:
		return nil, false // a person approved this evidence already
	}
	why := "waiting for a person to approve the plan " + out.Digest
	run := r.cfg.Space.RunArg(a.RunID)
	next := fmt.Sprintf("waiting for a person to approve the plan of %s (%s, %d bytes): cairn approve %s, or cairn reject %s", a.Step, out.Digest, out.Size, run, run)
	if unclear != "" {
		why = fmt.Sprintf("the evidence is unclear before %s, which cannot be undone: %s", a.Step, unclear)
		// The reasons, then the commands; what the record's bound cuts is the end of a long
		// list of reasons (the notice and the timeline keep them whole), never the commands.
		tail := fmt.Sprintf("; cairn approve %s, or cairn reject %s", run, run)
		next = kc.CutText("waiting for a person: "+why, max(kc.NextActionRoom(a.RunID)-len(tail), 0)) + tail
	}
	err = h.Release(ctx, func(n *kc.Record) error {
		n.Status = kc.WaitingApproval
		n.Approval = &kc.Approval{Step: a.Step, PlanDigest: out.Digest} // since: the store stamps this write's time
		n.Step(a.Step).Status = kc.Pending
		n.NextAction = kc.CutText(next, kc.NextActionRoom(a.RunID))
		return nil
	})
	if classify(err) == classFenced {
		r.fenced(ctx, a, err)
		return ack, true
	}
	if err != nil {
		return r.fail(ctx, a, h, Temporary(err)), true
	}
	r.auditStep(a, "approval.requested", a.Token.Value, cut(strings.TrimSpace(out.Digest+" "+unclear), 400))
	_ = a.batch.Wait(ctx)
	waiting, _ := h.Record()
	r.notify(ctx, "approval", HandoverNote{
		ID: fmt.Sprintf("%s:approval:%s:%s", a.RunID, a.Step, out.Digest), RunID: a.RunID, Step: a.Step,
		Error: why, NextAction: waiting.NextAction, At: r.stamp(),
	}, a.Generation, a.Token.Value)
	a.log.Info("waiting for approval", slog.String("plan", out.Digest), slog.String("unclear", unclear))
	return ack, true
}

// versionChangeNote begins what a step's last error says of a restart under other versions
// (its code, prompt, schema or model).
const versionChangeNote = "version change: "

// DriftAccepted is what the first step's last error says when a person resumed the run
// after a fix and the run reads its changed source again (the supervisor writes it): a later
// step that cannot be undone waits for a person on that evidence.
const DriftAccepted = "a person accepted a change of the source"

// anomalyNote begins what a verified step's last error says of an anomaly its verification
// found (Anomaly).
const anomalyNote = "its verification found an anomaly: "

// unclearEvidence says why rec's evidence is unclear before step, "" when it is clear: items
// an earlier step parked, an anomaly an earlier step's verification found, a step restarted
// under other versions than its first attempt's, and a source that changed during the run,
// read again once a person accepted it.
// Each reason names its step, in the pipeline's order, so the same evidence reads the same.
func unclearEvidence(rec *kc.Record, step string) string {
	var why []string
	for _, name := range rec.Pipeline {
		s := rec.Steps[name]
		if s == nil || (name != step && s.Status != kc.Verified) {
			continue
		}
		if s.ParkedCount > 0 && name != step {
			items := "items"
			if s.ParkedCount == 1 {
				items = "item"
			}
			why = append(why, fmt.Sprintf("%d %s parked at %s", s.ParkedCount, items, name))
		}
		if s.LastError != nil && strings.Contains(*s.LastError, versionChangeNote) {
			why = append(why, fmt.Sprintf("%s was restarted under other versions", name))
		}
		if s.LastError != nil && strings.HasPrefix(*s.LastError, anomalyNote) && name != step {
			why = append(why, fmt.Sprintf("%s %s", name, *s.LastError))
		}
		if s.LastError != nil && strings.Contains(*s.LastError, DriftAccepted) {
			why = append(why, fmt.Sprintf("the source changed during the run and %s read it again after a fix", name))
		}
	}
	return strings.Join(why, "; ")
}

// evidencePlan is what a person approves when the evidence is unclear: the reasons.
func evidencePlan(unclear string) ([]byte, error) {
	return json.Marshal(struct {
		Unclear string `json:"unclear"`
	}{unclear})
}
