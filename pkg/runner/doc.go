// Package runner runs one step of a pipeline: it consumes the step's durable consumer on
// CAIRN_STEPS and follows the step protocol of DESIGN.md for every message.
//
// # The protocol
//
//  1. Decode and validate the event; an invalid one is recorded on cairn.rejected and terminated.
//  2. Load the checkpoint; a corrupt or foreign record is handed over by its note alone.
//  3. Run only a running run's next step of the event's generation; a verified step is
//     confirmed from the stream leader and its successor's event published again.
//  4. Take the lease (leased steps), counting a restart when the step was in progress, and on
//     a restart check the source and the loop guard. A live lease of another owner is left
//     alone; an owner proven gone (two "no responders" answers) is released and its step
//     published again.
//  5. Raise the fences of the databases the step writes.
//  6. Run the step with a heartbeat that renews the lease and the message.
//  7. Every outside write carries its key and the token (the step's business).
//  8. Store the output (inline or in the object store), then Verify it as read back from the
//     store, still under the heartbeat; a failure hands the run over naming what did not hold.
//  9. Commit: verified, lease released, in one compare-and-set.
//  10. Publish the step's step.verified and the next step's event, wait for the attempt's other
//     audit events (the items it counted), ack. The first two are not waited for: the
//     supervisor publishes a lost step event again from the record, and a lost step.verified
//     costs a timeline line; a failure is logged, and Run returns once they are answered.
//
// A record this process wrote at the revision that scheduled the event (its id names it) is
// not read back at point 2 (kvcheckpoint's Store.LoadAt): the commit and the lease take
// are compare-and-sets on that revision, so a record that moved on since refuses them and
// is read then.
//
// # Concurrency
//
// Config.Concurrency (default 1) is how many messages a runner handles at once. Different
// runs go on side by side; two messages of one run never do: the second (a duplicate
// event) waits until the first is settled, keeping its own message alive meanwhile, and
// then finds the step done. The lease protects a run across processes as before.
//
// # Errors
//
// A temporary error fails the attempt: the step goes back to pending with attempts + 1 and the
// message comes back with NakWithDelay, until the loop guard hands the run over. A fenced
// attempt stops at once and publishes nothing. Anything else hands the run over to a person,
// with a note in cairn-handovers.
//
// # Stopping
//
// Run consumes through consume.Run. When ctx ends it takes no new work and gives the step
// in hand Config.StopGrace before stopping it (lease released, message handed back), and
// returns nil. When the loop ends by itself (the step's durable deleted) Config.Ended hears
// of it at once, the step in hand gets the same grace, and Run returns the error, wrapping
// consume.ErrEnded: a runner never sits idle on a loop that has ended.
package runner
