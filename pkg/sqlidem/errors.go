package sqlidem

import "errors"

// ErrInvalid means a table or a row that cannot be written as it is: a name that is not a
// plain SQL identifier, a key outside the token's run, values that do not match the
// columns, a row without its payload. Nothing is written.
var ErrInvalid = errors.New("invalid keyed row")
