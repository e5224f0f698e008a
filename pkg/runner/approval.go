package runner

import (
	"context"
	"fmt"
	"log/slog"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// approvalGate is the two phases of a step that waits for a person (DESIGN.md, "Approval").
// Without an approval of this step it plans: the plan is stored, and in one compare-and-set
// the run waits (status waiting_approval, approval {step, plan_digest, since}), the step is pending
// again and the lease released; the message is acked. With an approval it goes on only
// while a fresh plan has the approved digest; a plan that changed hands the run over.
func (r *Runner) approvalGate(ctx context.Context, a *Attempt, h *kc.Holder) (settle settleFunc, wait bool) {
	p := r.cfg.Step.(Planner)
	plan, err := p.Plan(ctx, a)
	if err != nil {
		return r.fail(ctx, a, h, fmt.Errorf("planning: %w", err)), true
	}
	out, err := r.cfg.Artifacts.Save(ctx, a.RunID, a.Step, plan)
	if err != nil {
		return r.fail(ctx, a, h, Temporary(fmt.Errorf("storing the plan: %w", err))), true
	}
	cur, _ := h.Record()
	if ap := cur.Approval; ap != nil && ap.Step == a.Step && ap.By != nil {
		if ap.PlanDigest != out.Digest {
			return r.handover(ctx, a, h, fmt.Errorf("the plan of %s changed since it was approved (approved %s, now %s): approve the new plan or rerun", a.Step, ap.PlanDigest, out.Digest)), true
		}
		return nil, false
	}
	err = h.Release(ctx, func(n *kc.Record) error {
		n.Status = kc.WaitingApproval
		n.Approval = &kc.Approval{Step: a.Step, PlanDigest: out.Digest} // since: the store stamps this write's time
		n.Step(a.Step).Status = kc.Pending
		n.NextAction = fmt.Sprintf("waiting for a person to approve the plan of %s (%s, %d bytes): cairn approve %s, or cairn reject %s", a.Step, out.Digest, out.Size, a.RunID, a.RunID)
		return nil
	})
	if classify(err) == classFenced {
		r.fenced(ctx, a, err)
		return ack, true
	}
	if err != nil {
		return r.fail(ctx, a, h, Temporary(err)), true
	}
	r.auditStep(a, "approval.requested", a.Token.Value, out.Digest)
	_ = a.batch.Wait(ctx)
	waiting, _ := h.Record()
	r.notify(ctx, "approval", HandoverNote{
		ID: fmt.Sprintf("%s:approval:%s:%s", a.RunID, a.Step, out.Digest), RunID: a.RunID, Step: a.Step,
		Error: "waiting for a person to approve the plan " + out.Digest, NextAction: waiting.NextAction, At: r.stamp(),
	}, a.Generation, a.Token.Value)
	a.log.Info("waiting for approval", slog.String("plan", out.Digest))
	return ack, true
}
