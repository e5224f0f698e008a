// Package kvcheckpoint keeps the checkpoint record of each run in the cairn-runs
// key-value bucket, and the lease that says which worker may write it.
//
// # The record
//
// A run has exactly one key, its run id, holding one JSON [Record]: the run's
// parameters and status, the pipeline and every step's progress, the lease, the
// next action in one sentence, the last command ids applied, the commands accepted that
// wait for the run's lease ([Command], at most [MaxCommands]; see [Record.Wait]), and the
// approval, handover and undo in flight. Every field is always present, null or empty when it
// has no value, so a person reading the raw entry sees the whole shape. A record is
// at most [MaxSize] bytes: large outputs and long parked lists live in the artifact
// store and the record points at them. [Encode] refuses a larger record with
// [ErrTooLarge] before anything is sent.
//
// # The integrity sum and the epoch
//
// "sum" is sha256:<hex> of the RFC 8785 (JCS) canonical form of the record with
// "sum" removed. [Decode] checks it on the parsed JSON before decoding into structs;
// a record that does not match is [ErrCorrupt], is never trusted and never written
// back: the run is handed over by its note alone and the entry stays for a person
// to inspect.
//
// The sum is computed in one pass by a canonicalizer that knows what records hold, and
// records are decoded by a decoder written for [Record]; anything either does not know
// (a fraction, a duplicate key, an unknown field) goes to encoding/json and
// gowebpki/jcs, whose answer is the one that counts (fuzz tests hold the two paths
// equal).
//
// cairn init gives the bucket a random cairn.epoch in its stream metadata; [Open]
// reads it and every record carries it. A record of another epoch ([ErrForeignEpoch])
// was written under other NATS storage, where revisions, and so tokens, counted
// differently.
//
// # Schema versions
//
// "schema" says the record's layout; this package writes [Schema] and reads every earlier
// one. The sum is checked on the record as stored, in its own layout; then a record of an
// earlier schema is upgraded in memory, one version at a time (schema 1 had no
// "updated_at": it becomes the creation time; schema 2 had no "commands": none waited), and
// the next write, whoever makes it,
// stores the current schema. Every write sets "updated_at" by the writer's clock
// ([WithClock]); it is for people reading the record, and no lease is judged by it. A write
// that is progress ([Progressed]: a renewal is not) sets "progressed_at" too, and one that
// begins an approval's wait "approval.since": the supervisor's timeouts count from them.
//
// A record of a later schema than this code knows, written by a newer release during a
// rolling upgrade, is [ErrNewerSchema]: not corrupt, and never written by this code.
// Callers leave such a run to the newer release (a step event is redelivered, a sweep
// skips it) instead of handing it over. A record without a schema, or below 1, is corrupt.
//
// # Who holds which token
//
// The lease's whole life (owners and their inboxes, the heartbeat, takeover of an owner gone,
// expiry) is package [github.com/cairnhq/cairn/pkg/lease]; this package makes its writes.
//
// Every write is a compare-and-set conditioned on the revision read; Put is never
// used, so no write can silently replace one it did not see.
//
// A worker takes a step's lease with [Store.Take] on the record it read at revision
// R: the write sets lease = {owner, owner_inbox, token: R, step, write_id}. The token
// is the revision the lease was taken on. Revisions are the bucket stream's
// sequence and only grow, so a later take carries a larger token, and two workers
// taking on the same revision cannot both win: the loser gets [ErrConflict].
// Ownership is lease.owner and lease.token in the latest record, never "my revision
// is the latest"; outside systems compare the same token in their fences.
//
// The [Holder] a take returns is the one goroutine of an attempt that writes the
// record: [Holder.Write] for progress, [Holder.Renew] for the heartbeat (a fresh
// write_id), [Holder.Release] for the last write, which clears the lease together
// with the step's outcome. Writers without a lease (the supervisor, commands) use
// [Store.Mutate]: they copy the lease unchanged and write their own fields as
// absolute values, so applying them twice is harmless.
//
// # What a stale writer sees
//
// A holder whose compare-and-set fails with jetstream.ErrKeyRevisionMismatch (or
// gets no answer in time) re-reads the key's history since the revision it wrote on:
//
//   - the very record it wrote (its own write_id, or for a release the same bytes) is
//     among those revisions: the write landed and the answer was lost, even if another
//     writer wrote after it; Write returns nil and the holder goes on from the latest;
//   - its own owner and token with other changes (a cancel, the supervisor's
//     bookkeeping): it applies its change again on the new revision;
//   - another token, or no lease: it was fenced. Write returns [ErrFenced] and writes
//     nothing; the worker stops at once, and the record is no longer its own.
//
// [Store.Mutate] re-reads and re-applies on every conflict, and [Store.Take] answers
// a conflict with [ErrConflict]: the caller reads again and decides again.
//
// # Records this store wrote
//
// A store remembers the last record it wrote for each run. [Store.LoadAt] hands it
// back, without a read, when a step event names that very revision: the step a commit
// of this process scheduled (services sharing one process, as under cairn dev). The
// record may be older than the latest, when another process wrote after it; every
// write is a compare-and-set on the revision read, so a write based on it is refused
// and the writer reads the latest then.
//
// # A step's states
//
//	            Take                     commit (Release)
//	pending ─────────────▶ in_progress ─────────────────▶ verified
//	   ▲                        │
//	   └────────────────────────┤ failure, SIGTERM, plan phase:
//	                            │ released with attempts + 1 on a failure
//	                            │
//	                            └──────▶ failed   (handover)
//
// Taking the lease sets the step in_progress in the same write. A commit sets it
// verified and releases the lease in one write. An attempt that ends without a
// commit sets it back to pending and releases the lease in its last write, and a
// handover sets it failed. So a step found in_progress with no lease, or with a
// lease whose owner is gone or expired, is one whose attempt died, and its next
// taker counts a restart.
package kvcheckpoint
