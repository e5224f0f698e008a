package books

import (
	"errors"

	"github.com/cairnhq/cairn/pkg/idempotency"
)

var (
	// ErrConflict means a key already holds another payload: the run that
	// wrote it and the run writing now disagree, and a person must look. It is
	// idempotency.ErrConflict, the class every keyed write shares; the error
	// names the key, both digests and the columns that differ.
	ErrConflict = idempotency.ErrConflict
	// ErrNoStockLevel means an adjustment names a warehouse and sku with no
	// stock_levels row to change.
	ErrNoStockLevel = errors.New("no stock level")
	// ErrNoOriginal means a reversal names a key that was never written.
	ErrNoOriginal = errors.New("reversed key not found")
	// ErrInvalid means a row is missing what every row must have.
	ErrInvalid = errors.New("invalid row")
	// ErrUnsupportedDSN means the DSN names a database Open cannot open.
	ErrUnsupportedDSN = errors.New("unsupported DSN")
	// ErrRefused means PostgreSQL refused the DSN itself: its user or password, its
	// database (which does not exist), or the role's privileges. Trying again with the
	// same DSN cannot help.
	ErrRefused = errors.New("the database refused the DSN")
	// ErrNotNegation means a reversal is not the exact negation of the row it names (another
	// amount, quantity, run, line or supplier), or names a row that is itself a reversal.
	ErrNotNegation = errors.New("reversal is not the negation of its row")
	// ErrAlreadyReversed means the row a reversal names has a reversal under another key.
	ErrAlreadyReversed = errors.New("row reversed already")
)
