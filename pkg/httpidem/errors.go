package httpidem

import (
	"errors"

	"github.com/cairnhq/cairn/pkg/retry"
)

var (
	// ErrInvalidKey means an Idempotency-Key field value is neither a Structured Field
	// String nor a bare key of visible ASCII, or is empty.
	ErrInvalidKey = errors.New("invalid idempotency key")
	// ErrKeyTooLong means a key is longer than [MaxKeyLen] bytes.
	ErrKeyTooLong = errors.New("idempotency key too long")
	// ErrInvalidFence means the fencing headers are malformed: one without the other, a
	// token that is not a decimal integer of at most 63 bits, or a bad run id.
	ErrInvalidFence = errors.New("invalid fencing headers")
)

// ErrClaimLost means a claim's key was no longer in flight under that claim when its
// answer was stored: it expired and another request took it.
var ErrClaimLost = errors.New("idempotency claim lost")

// The classes of a write's failure ([Client.Write] returns them as an [*Error]).
var (
	// ErrInFlight: 409, the key is in flight on the server; retry later with the same key.
	// It is also retry.ErrTemporary.
	ErrInFlight = retry.Temporary(errors.New("idempotency key in flight"))
	// ErrFenced: 409 with problem type TypeFenced, a newer token of the run has reached
	// the server: the caller is a zombie, counts the write as fenced and stops. It is
	// also fence.ErrFenced.
	ErrFenced = errors.New("fenced by the server")
	// ErrKeyConflict: 422, the key holds another payload; the run is handed over naming
	// the key. It also matches idempotency.ErrConflict (an *idempotency.ConflictError).
	ErrKeyConflict = errors.New("idempotency key holds another payload")
	// ErrRateLimited: 429, or 503 with Retry-After; Error.Wait is how long the server
	// asked to wait. It is also retry.ErrTemporary.
	ErrRateLimited = retry.Temporary(errors.New("rate limited by the server"))
	// ErrTemporary: another 5xx, a refused or reset connection, a timeout, or a lost
	// answer whose lookup failed too; a retry with the same key is safe. It is the
	// class of [Error] that says so, and retry.ErrTemporary too.
	ErrTemporary = retry.Temporary(errors.New("temporary failure of the outside system"))
	// ErrRejected: another 4xx (or a 3xx, never followed); Error.Problem holds the
	// server's problem details, for parking the item.
	ErrRejected = errors.New("rejected by the server")
)

// The refusals of a request's authentication ([Authenticate]).
var (
	// ErrDigestMismatch: the Content-Digest field does not hold the body's sha-256.
	ErrDigestMismatch = errors.New("content digest mismatch")
	// ErrUnauthenticated: the request is not signed by a registered key, or its signature
	// is out of date or does not hold.
	ErrUnauthenticated = errors.New("request not authenticated")
)
