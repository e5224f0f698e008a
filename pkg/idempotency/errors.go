package idempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
)

// ErrConflict means a key already holds another payload.
var ErrConflict = errors.New("key holds another payload")

// ConflictError is an ErrConflict that names the key and the digests of both payloads.
type ConflictError struct {
	Key    string // the idempotency key
	Stored string // digest of the payload the key holds
	New    string // digest of the payload refused
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("key %q holds another payload: stored %s, new %s", e.Key, e.Stored, e.New)
}

// Is makes a ConflictError match ErrConflict.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// Conflict is the error for key holding the payload of digest stored when one of digest
// fresh is written.
func Conflict(key, stored, fresh string) error {
	return &ConflictError{Key: key, Stored: stored, New: fresh}
}

// Digest is "sha256:<hex>" of b.
func Digest(b []byte) string {
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}
