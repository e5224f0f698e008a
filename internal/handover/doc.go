// Package handover is the one home of handover notes: what a person reads in the space's
// cairn-handovers bucket when a run stops for them, and how the framework's services write
// one. The step runner, the supervisor and the compensator all hand runs over through it;
// a job never does (it returns a permanent error, and the runner hands over).
//
// # The order of a handover
//
// The note is written first (Put), under the run's id, then the record names it in one
// compare-and-set (Name: handover, next_action; the writer sets the status). A record that
// says handed_over therefore always has its note; a note whose record write was lost is
// overwritten by the next handover of the run, or read beside a record that goes on.
// A run whose record cannot be trusted gets the note alone (Untrusted), once (Noted).
//
// # Note ids
//
// An id names the run, the step (or "undo", "run", "record") and why, so that a repeat
// of the same handover writes the same note and notifies once:
//
//	<run>:handover:<step>:<token>        a leased attempt that failed (the runner)
//	<run>:handover:<step>:panic          a step event that made the runner panic
//	<run>:handover:<step>:<tag>          what a runner cannot start (record_full, max-deliver)
//	<run>:handover:<step>:<reason>[:rev] the supervisor's (stall, reassign_limit, outbox_stall ...)
//	<run>:handover:overreach:<rev>       a record a writer overreached, put back
//	<run>:handover:record                a record that cannot be trusted (the note alone)
//	<run>:handover:undo:<why>            an undo handed over (system, refused, panic, forged)
//
// The types are public as runner.HandoverNote, runner.HandoverDone and runner.StepDone
// (aliases), since notifiers and the cairn command read them.
package handover
