package fence

import "errors"

var (
	// ErrFenced means a higher token holds the fence: another worker took the
	// run's lease after this one, so this one must stop writing.
	ErrFenced = errors.New("fenced")
	// ErrForeignEpoch means the fence holds another epoch: the NATS storage
	// the token came from is not the one the database was fenced under.
	ErrForeignEpoch = errors.New("foreign epoch")
	// ErrInvalidToken means the token cannot be written as a fence: an empty
	// run id or epoch, or a value beyond a signed 64-bit SQL integer.
	ErrInvalidToken = errors.New("invalid fence token")
	// ErrInvalidTable means the fence table name is not a plain SQL identifier.
	ErrInvalidTable = errors.New("invalid fence table name")
)
