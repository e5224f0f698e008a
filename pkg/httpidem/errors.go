package httpidem

import "errors"

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
