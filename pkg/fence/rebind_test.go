package fence_test

import (
	"testing"

	"github.com/cairnhq/cairn/pkg/fence"
)

func TestRebind(t *testing.T) {
	t.Parallel()
	q := `SELECT a FROM t WHERE b = ? AND c IN (?, ?)`
	if got := fence.SQLite.Rebind(q); got != q {
		t.Errorf("sqlite rebind = %q", got)
	}
	if got, want := fence.Postgres.Rebind(q), `SELECT a FROM t WHERE b = $1 AND c IN ($2, $3)`; got != want {
		t.Errorf("postgres rebind = %q, want %q", got, want)
	}
}
