package events

// ApprovalMessage is what an approver signs to approve the plan planDigest of run runID
// (identity.DomainApprove): the approval is of that plan, so it cannot be carried over to
// another plan or another run.
func ApprovalMessage(runID, planDigest string) []byte {
	return []byte(runID + "\n" + planDigest)
}
