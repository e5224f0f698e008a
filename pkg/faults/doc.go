// Package faults injects failures at named points of a step, for tests and chaos runs.
//
// CAIRN_FAULTS is a comma-separated list of <step>.<point>[.<n>]=<action>[@once]: points are
// before-commit, after-commit, before-write, after-write, lost-reply, before-next-publish and
// after-record (the supervisor's and the compensator's: a command written into the record);
// n is the 1-based write index in key order. The outbox sender has points of its own under
// the name outbox-sender: before-deliver and after-deliver (handed over, not yet marked
// sent), n its 1-based delivery; actions are exit (the process exits at once with
// code 3), error:temporary|permanent|unknown, stall[:duration], and panic (the handler
// panics, as a bug would: its boundary recovers, records and settles it). @once leaves a marker file
// so that the fault does not fire again after the restart it causes.
package faults
