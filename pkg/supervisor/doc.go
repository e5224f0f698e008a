// Package supervisor runs the run commands (start, cancel, resume) and watches the
// checkpoints: it frees the leases of owners that are gone or expired, moves on runs whose
// next step never got its event, and marks finishing runs done once their mail is sent.
//
// A finishing run waits on its mail alone: it is handed over at once when a message was
// refused for good (the mark says refused), and when messages are still undelivered
// OutboxStall after its last progress, the note naming them. A resume of such a run queues
// the refused and never-claimed messages again first (Requeue); a message with a sending
// mark is left to its copy on the outbox-sender durable, which never gives one up.
//
// Every action is a compare-and-set on the run's record, so two supervisors at once do no
// harm. A republish first records itself (a write, audited) and uses that write's revision
// in its Msg-Id, so deduplication never swallows it.
package supervisor
