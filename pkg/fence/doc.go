// Package fence keeps a stale worker from writing to an outside SQL database.
//
// # The model
//
// A worker may write to a fenced system only while it holds the run's lease.
// Leases carry a token (the checkpoint revision that took them), and a later
// take always carries a larger token. A lease alone cannot stop a worker that
// was paused or cut off and then taken over: it may wake up and write before
// it notices. The fence closes that gap inside the database itself.
//
// Each database has a fences table, one row per run:
//
//	fences(run_id TEXT PRIMARY KEY, epoch TEXT NOT NULL, token INTEGER NOT NULL)
//
// [Hold] raises the row to the caller's token (never lowers it) and reads back
// what it holds, in one statement:
//
//	INSERT INTO fences(run_id, epoch, token) VALUES (...)
//	ON CONFLICT(run_id) DO UPDATE SET token = CASE WHEN fences.epoch = excluded.epoch
//	  THEN max(fences.token, excluded.token) ELSE fences.token END
//	RETURNING epoch, token
//
// A returned token above the caller's means a newer holder has raised the
// fence: [ErrFenced]. A returned epoch other than the caller's means the row
// was written under other NATS storage: [ErrForeignEpoch].
//
// # Who calls Hold, and when
//
// A holder calls Hold on the database right after taking a lease, before any
// other work, so that an older holder is shut out at once. Then every write
// calls Hold again inside its own transaction, before the write: the row lock
// the upsert takes serialises the check with any concurrent raise, so a write
// either commits under the highest token or is refused and rolled back. A
// refused write ends the attempt; it is never retried with the same token.
//
// # Epochs and adoption
//
// The epoch names the NATS storage the tokens come from. If that storage is
// lost or replaced while the databases stay, revisions start again from 1 and
// old fences would refuse every new token; instead the epoch differs and the
// run is handed over as a foreign epoch. After a person has checked, [Adopt]
// moves the run's fence to the new epoch and token.
//
// # Dialects
//
// The statements are the same on SQLite and PostgreSQL except for max versus
// GREATEST and the placeholders; a [Dialect] chooses between them.
package fence
