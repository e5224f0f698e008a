// Package runner runs one step of a pipeline: it consumes the step's durable consumer on
// CAIRN_STEPS and follows the step protocol of DESIGN.md for every message.
//
// # A step
//
// A step is a Step: most simply a typed function (Func, Typed), whose input is what the step
// waits for, decoded (an earlier step's output, a join's outputs by step name, or the run's
// input), and whose output, a Go value, is its checkpoint; In reads any other earlier step.
// Everything outside goes through the Attempt: Memo (and the typed Memo) for a paid call,
// made once a run, after a slot of the step's declared rate limit; Keyed for keyed writes;
// Queue for messages through the outbox; Retry for an item's temporary failure. Memo and
// Keyed are the step's fault points. A step may also be a type with Run, and the interfaces
// Fencer, Verifier, SourceChecker, Planner, ProgressCounter and Versioner.
//
// # The protocol
//
//  1. Decode and validate the event; an invalid one is recorded on cairn.rejected and terminated.
//  2. Load the checkpoint; a corrupt or foreign record is handed over by its note alone.
//  3. Run only a running run's next step of the event's generation; a verified step is
//     confirmed from the stream leader and its successor's event published again.
//  4. Take the lease (leased steps), counting a restart when the step was in progress; after a
//     break check the source (below), and on a restart the loop guard. A live lease of another
//     owner is left alone; an owner proven gone (two "no responders" answers) is released and
//     its step published again.
//  5. Raise the fences of the databases the step writes.
//  6. Run the step with a heartbeat that renews the lease and the message.
//  7. Every outside write carries its key and the token (the step's business).
//  8. Store the output (inline or in the object store), then Verify what was stored, still
//     under the heartbeat; a failure hands the run over naming what did not hold.
//  9. Commit: verified, lease released, in one compare-and-set.
//  10. Publish the step's step.verified and the next step's event, wait for the attempt's other
//     audit events (the items it counted), ack. The first two are not waited for: the
//     supervisor publishes a lost step event again from the record, and a lost step.verified
//     costs a timeline line; a failure is logged, and Run returns once they are answered. A
//     lease-free step that counted no outside effect publishes no step.verified: its
//     verified step in the record is its timeline line, so its transition pays one synced
//     write, the checkpoint's.
//
// A record this process wrote at the revision that scheduled the event (its id names it) is
// not read back at point 2 (kvcheckpoint's Store.LoadAt): the commit and the lease take
// are compare-and-sets on that revision, so a record that moved on since refuses them and
// is read then.
//
// # Drift
//
// Whenever a run continues after a break, a step that checks the source
// (pipeline.Step.ChecksSource, a SourceChecker) compares it with the run's fingerprint
// before it does anything, lease-free steps included; a change is ErrSourceChanged, naming
// the documents, and hands the run over before any outside write. A step continues
// without a break only when the record it starts from is, unchanged, the commit that
// scheduled it and its event says the committing attempt vouched for the source
// (events.StepReady.Vouched); a resume, a rerun, a reassignment or any event the
// supervisor published, a crash between a commit and its event, a restart, a retry, and
// any write since the commit are breaks. A commit vouches only when its attempt continued,
// checked, read the source itself, or the run has no fingerprint yet, so a break at a step
// that cannot check is checked by the next one. A night without faults checks its source
// at no step after fetch, in one process (cairn dev) or with one service per step.
//
// # What the record says of an attempt
//
// Besides what the step returns, the commit records what the framework saw: the step's
// input_fingerprint (its params and the earlier outputs it read through Attempt.Input,
// InputRef and Snapshot, with the step's own Result.InputFingerprint folded in), its
// versions (Config.CodeVersion, BuildVersion by default, and the step's Versioner), and
// effects.intents_open: its saga records (Attempt.RecordEffect) of this generation whose
// intent has no outcome, counted as it records them, from one read of its earlier records;
// a failure and a handover record the count too. An attempt under other versions than the
// step's earlier one records version.changed.
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
