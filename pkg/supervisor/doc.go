// Package supervisor runs the run commands (start, cancel, resume) and watches the
// checkpoints: it frees the leases of owners that are gone or expired, moves on runs whose
// next step never got its event, and marks finishing runs done once their mail is sent.
//
// A finishing run waits on its mail alone: it is handed over at once when a message was
// refused for good (the mark says refused), and when messages are still undelivered
// OutboxStall after its last progress (a message delivered is progress), the note naming them. A resume of such a run queues
// the refused and never-claimed messages again first (Requeue); a message with a sending
// mark is left to its copy on the outbox-sender durable, which never gives one up.
//
// The stall timeouts count from the record's progressed_at, the approval timeout from its
// approval.since, by the supervisor's clock, so a restart does not start them again; how a
// writer's clock is trusted is timer.began's rule (timers.go).
//
// Every action is a compare-and-set on the run's record, so two supervisors at once do no
// harm. A republish first records itself (a write, audited) and uses that write's revision
// in its Msg-Id, so deduplication never swallows it.
//
// # One run per input
//
// A run's natural key is its pipeline and its input ([NaturalKey]). A start claims it in the
// natural-keys bucket with Create, naming its run id, before it creates the record: a start
// of an input another run id holds is refused (on cairn.rejected, naming that run), so the
// same input never runs twice; a rerun is how a run goes again. A claim naming the start's
// own run id is a retry after a crash between claim and record, and goes on.
//
// # Unknown subjects
//
// CAIRN_RUNS and CAIRN_STEPS are work queues: a message on a subject no consumer filters (a
// verb no release knows, a step no pipeline has) would stay forever, delivered to no one.
// [Supervisor.SweepUnknown], every UnknownSweep, rejects each such message on cairn.rejected
// with its reason and then deletes it. A subject is unknown only if neither a consumer this
// release defines nor one that exists on the stream filters it, so nothing a consumer takes
// is ever deleted.
package supervisor
