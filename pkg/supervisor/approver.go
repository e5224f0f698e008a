package supervisor

import (
	"context"

	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/identity"
)

// approver is who approves the plan planDigest of run, and their signature of it for the
// record (every reader checks it again: kvcheckpoint's approval sig): with Config.Approvers,
// the approver whose registered key signed the plan (the command's sig), never a name the
// command merely types; an unsigned or wrongly signed approve is refused with its reason.
// Without Approvers, the name the command gives (typed), and no signature.
func (s *Supervisor) approver(ctx context.Context, runID, planDigest string, c events.Command, typed string) (string, *string, error) {
	if s.cfg.Approvers == nil {
		return typed, nil, nil
	}
	if c.Sig == nil {
		return "", nil, reject("approve of %s: %v: an approval is signed by a registered approver (cairn approver add NAME PUBKEY; cairn approve RUN --by NAME --seed FILE)", runID, identity.ErrUnsigned)
	}
	if c.By != "" && c.By != c.Sig.By {
		return "", nil, reject("approve of %s: it names %q but is signed by %q", runID, cut(c.By, 64), cut(c.Sig.By, 64))
	}
	if err := s.cfg.Approvers.VerifyApprover(ctx, identity.ApprovalMessage(runID, planDigest), c.Sig); err != nil {
		return "", nil, reject("approve of %s (plan %s) by %q: %v", runID, planDigest, cut(c.Sig.By, 64), err)
	}
	sig := c.Sig.Sig
	return c.Sig.By, &sig, nil
}
