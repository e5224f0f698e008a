// Package supervisor runs the run commands (start, cancel, resume) and watches the
// checkpoints: it frees the leases of owners that are gone or expired, moves on runs whose
// next step never got its event, and marks finishing runs done once their mail is sent.
//
// Every action is a compare-and-set on the run's record, so two supervisors at once do no
// harm. A republish first records itself (a write, audited) and uses that write's revision
// in its Msg-Id, so deduplication never swallows it.
package supervisor
