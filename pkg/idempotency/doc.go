// Package idempotency names the one way a keyed write goes wrong: its key already holds
// another payload.
//
// # The model
//
// Every outside effect of a run is written under an idempotency key built from ids only
// (a row of a business system, an HTTP write, an outbox message, a memoised model answer, an
// artifact's content-addressed name). Writing a key again with the same payload is a
// harmless repeat: that is what makes a restart safe. Writing it with another payload means
// the attempt that wrote it first and the one writing now disagree about what the key
// stands for; keeping either silently would lose the other. So every store that enforces
// keys refuses the second payload with an error that [errors.Is] [ErrConflict] and names
// the key and the sha256 digests of both payloads ([Conflict]), and the step runner hands
// the run over to a person with it, never retrying it.
//
// # Digests
//
// [Digest] is "sha256:<hex>" of a payload's bytes. Each store decides which bytes stand
// for its payload (the fields that must match, keys and times aside), so that the same
// effect written again, by any attempt or release, has the same digest.
package idempotency
