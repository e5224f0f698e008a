package idempotency_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cairnhq/cairn/pkg/idempotency"
)

func TestConflictNamesKeyAndDigests(t *testing.T) {
	stored, fresh := idempotency.Digest([]byte("a")), idempotency.Digest([]byte("b"))
	err := fmt.Errorf("writing: %w", idempotency.Conflict("run-x:debit:SUP-07", stored, fresh))
	if !errors.Is(err, idempotency.ErrConflict) {
		t.Fatalf("%v is not ErrConflict", err)
	}
	var c *idempotency.ConflictError
	if !errors.As(err, &c) || c.Key != "run-x:debit:SUP-07" || c.Stored != stored || c.New != fresh {
		t.Fatalf("conflict %+v", c)
	}
	for _, want := range []string{"run-x:debit:SUP-07", stored, fresh} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not name %q", err, want)
		}
	}
	if stored != "sha256:ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb" {
		t.Errorf("Digest(a) = %s", stored)
	}
}
