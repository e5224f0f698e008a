package kvcheckpoint

import "errors"

var (
	// ErrNotFound: the run has no record.
	ErrNotFound = errors.New("checkpoint not found")
	// ErrExists: Create found a record for the run already.
	ErrExists = errors.New("checkpoint exists")
	// ErrCorrupt: the stored record's sum does not match its content, or it has no valid
	// schema; it is never trusted nor written.
	ErrCorrupt = errors.New("checkpoint corrupt")
	// ErrNewerSchema: the record was written by a newer release, in a schema this code does not
	// know (a rolling upgrade). It is not corrupt: leave the run to the newer release.
	ErrNewerSchema = errors.New("checkpoint written in a newer schema")
	// ErrForeignEpoch: the record carries another epoch than the bucket's.
	ErrForeignEpoch = errors.New("checkpoint from a foreign epoch")
	// ErrFenced: the lease is no longer the writer's: another token holds it, or nobody does.
	ErrFenced = errors.New("fenced")
	// ErrLeaseHeld: a live lease of another owner holds the run.
	ErrLeaseHeld = errors.New("lease held by another owner")
	// ErrNoEpoch: the bucket's stream metadata has no cairn.epoch (run cairn init).
	ErrNoEpoch = errors.New("bucket has no cairn.epoch")
	// ErrTooLarge: the record exceeds MaxSize.
	ErrTooLarge = errors.New("checkpoint too large")
	// ErrTooManyCommands: the record keeps MaxCommands waiting commands already, or the
	// command is too large to keep; the command is refused, not lost.
	ErrTooManyCommands = errors.New("too many commands waiting")
	// ErrSkip, returned by a mutation, writes nothing.
	ErrSkip = errors.New("nothing to write")
	// ErrInvariant: the record decodes and its sum holds, but it breaks an invariant every
	// record Cairn writes keeps (invariants.go); it always comes wrapped with ErrCorrupt too,
	// so it is treated as a corrupt record is: never acted on, handed over, the entry kept.
	ErrInvariant = errors.New("checkpoint breaks an invariant")
	// ErrForged: the record is not signed by a registered service that may write it as it
	// stands (sign.go); it comes with ErrCorrupt, and is treated as a damaged record.
	ErrForged = errors.New("checkpoint not signed by a writer allowed to write it")
	// ErrRolledBack: the record is not the newest write of its own history (history.go): an
	// earlier revision put back, or a write the server did not check against the key's
	// previous revision. It comes with ErrCorrupt and ErrForged.
	ErrRolledBack = errors.New("checkpoint not written over the revision before it")
)
