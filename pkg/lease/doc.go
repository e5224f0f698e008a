// Package lease is the run lease's whole life in one place: who may hold it, taking it,
// renewing it, releasing it, taking it over from an owner that is gone, and judging it
// expired. The record's writes themselves (the compare-and-sets) are kvcheckpoint's
// Store.Take and Holder; every other rule is here, and the runner, the supervisor and the
// compensator follow it through this package.
//
// # The rules
//
//   - The lease is the record's "lease" field, {owner, owner_inbox, token, step, write_id},
//     or null. At most one stands on a run: a step's (the runner's), or the compensator's,
//     whose step is "undo" (kvcheckpoint.UndoLease).
//   - Owner. A process takes leases under one identity, NewOwner: <service>/<host>/<pid>-<6 of
//     a nuid>, answering on its pipeline's owner inbox <root>owner.<service>.<nuid>
//     (cairn.owner.<service>.<nuid> for the night, cairn.<name>.owner.<service>.<nuid> for
//     pipeline <name>: Prefix), from before its first take until it stops (Answer). A lease naming an inbox of another shape (CheckInbox, ErrForeignInbox) is
//     a forged or corrupt record's: its inbox is never asked, its lease never released; the
//     supervisor hands the run over naming it, a worker leaves it alone.
//   - Take. A lease is taken only when none stands (otherwise kvcheckpoint.ErrLeaseHeld),
//     by a compare-and-set on the revision R the taker read: the token is R. Two takers on
//     one revision cannot both win; the loser gets kvcheckpoint.ErrConflict and reads again.
//     Taking sets the step in_progress in the same write. Ownership is the owner and token
//     in the latest record, and the token is what fences compare.
//   - Renew. While a step's work runs, a heartbeat (Keep) every CAIRN_HEARTBEAT tells
//     JetStream the message is in progress and renews the lease: a write with a fresh
//     write_id, which is not progress. A renewal that finds the lease another's, or none,
//     (kvcheckpoint.ErrFenced) cancels the work at once. A stalled attempt skips its beats, as a
//     stopped process would. The heartbeat stops before the commit. The compensator's
//     cursor writes renew its lease as it goes.
//   - Writes and lost replies (kvcheckpoint.Holder.Write): a holder whose compare-and-set
//     fails or gets no answer re-reads the history since its revision: its own write_id
//     there means the write landed; its own owner and token with other changes mean the
//     change is applied again; anything else is ErrFenced, and the holder stops, writing
//     nothing more.
//   - Release. The holder releases its lease in its last write, together with the
//     outcome (a commit, a failure, a stop, a handover). Anyone else releases a lease only
//     when its owner is proven gone or the lease expired, by a compare-and-set on that very
//     lease (a renewal in between keeps it), audited as "reassigned"; the step stays
//     in_progress, so its next taker counts a restart, and a running run's step event is
//     published again with the release's revision as Msg-Id (Takeover.Release).
//   - Owner gone (fast takeover). Two "no responders" answers from the owner inbox,
//     CAIRN_TAKEOVER_GAP apart, with the asker connected throughout, prove the owner gone
//     (OwnerGone). A timeout proves nothing: the lease stands until it expires. A worker that
//     finds a lease on the step it was sent asks (Takeover.ReleaseGone); the compensator asks
//     only of an undo's lease; the supervisor asks every owner at its start, and once of a
//     lease unchanged for two heartbeats.
//   - Expiry. Only the supervisor judges a lease expired, by its own clock (Expiry): a lease
//     whose mark (token and write_id, Mark) has not changed for CAIRN_LEASE has expired.
//     Workers never compare clocks across hosts. An expired lease is released as a gone
//     owner's is, unless the run has been reassigned too often: then it is handed over.
//   - Timings: CAIRN_LEASE ≥ 3 × CAIRN_HEARTBEAT, CAIRN_TAKEOVER_GAP < CAIRN_LEASE.
package lease
