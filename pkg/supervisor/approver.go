package supervisor

import (
	"context"

	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/identity"
)

// approver is who approves the plan planDigest of run: with Config.Approvers, the approver
// whose registered key signed the plan (the command's sig), never a name the command merely
// types; an unsigned or wrongly signed approve is refused with its reason. Without
// Approvers, the name the command gives (typed).
func (s *Supervisor) approver(ctx context.Context, runID, planDigest string, c events.Command, typed string) (string, error) {
	if s.cfg.Approvers == nil {
		return typed, nil
	}
	if c.Sig == nil {
		return "", reject("approve of %s: %v: an approval is signed by a registered approver (cairn approver add NAME PUBKEY; cairn approve RUN --by NAME --seed FILE)", runID, identity.ErrUnsigned)
	}
	if c.By != "" && c.By != c.Sig.By {
		return "", reject("approve of %s: it names %q but is signed by %q", runID, cut(c.By, 64), cut(c.Sig.By, 64))
	}
	if err := s.cfg.Approvers.VerifyApprover(ctx, events.ApprovalMessage(runID, planDigest), c.Sig); err != nil {
		return "", reject("approve of %s (plan %s) by %q: %v", runID, planDigest, cut(c.Sig.By, 64), err)
	}
	return c.Sig.By, nil
}
