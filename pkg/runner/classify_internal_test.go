package runner

import (
	"fmt"
	"testing"

	"github.com/cairnhq/cairn/pkg/idempotency"
)

// A key holding another payload hands the run over, even marked temporary: no retry
// changes what the two attempts wrote.
func TestClassifyConflictHandsOver(t *testing.T) {
	c := idempotency.Conflict("r:debit:SUP-1", idempotency.Digest([]byte("a")), idempotency.Digest([]byte("b")))
	for _, err := range []error{c, fmt.Errorf("writing r:debit:SUP-1: %w", c), Temporary(c)} {
		if got := classify(err); got != classUnknown {
			t.Errorf("classify(%v) = %s, want unknown (a handover)", err, got)
		}
	}
}
