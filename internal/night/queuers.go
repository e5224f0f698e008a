package night

// Kinds are the kinds of message each of the night's steps queues (outbox.Trust.Kinds):
// debit-notes its notes and, on a rerun, their withdrawals; report the report; an undo the
// withdrawals of notes that went. Notices are queued by whichever service hands over.
func Kinds() map[string][]string {
	return map[string][]string{
		DebitNotes: {kindDebit, kindWithdraw},
		Report:     {kindReport},
		"undo":     {kindWithdraw},
	}
}
