package lease_test

import (
	"testing"
	"time"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/lease"
)

// A lease unchanged for two heartbeats is overdue (its owner is asked), for a whole lease
// expired; the two never hold at once.
func TestExpiryJudgesByHowLongTheMarkStoodUnchanged(t *testing.T) {
	t.Parallel()
	e := lease.Expiry{Heartbeat: 5 * time.Second, Lease: 15 * time.Second}
	for _, c := range []struct {
		unchanged        time.Duration
		overdue, expired bool
	}{
		{0, false, false},
		{10*time.Second - 1, false, false},
		{10 * time.Second, true, false},
		{15*time.Second - 1, true, false},
		{15 * time.Second, false, true},
		{time.Hour, false, true},
	} {
		if got := e.Overdue(c.unchanged); got != c.overdue {
			t.Errorf("Overdue(%s) = %v, want %v", c.unchanged, got, c.overdue)
		}
		if got := e.Expired(c.unchanged); got != c.expired {
			t.Errorf("Expired(%s) = %v, want %v", c.unchanged, got, c.expired)
		}
	}
}

// The mark changes with every write of the holder (a fresh write_id) and with a new token.
func TestMarkIsTokenAndWriteID(t *testing.T) {
	t.Parallel()
	l := &kc.Lease{Owner: "a/h/1-abcdef", Token: 7, Step: "s", WriteID: "w-1"}
	if got := lease.Mark(l); got != "7/w-1" {
		t.Errorf("Mark = %q, want 7/w-1", got)
	}
	if got := lease.Mark(nil); got != "" {
		t.Errorf("Mark(nil) = %q, want empty", got)
	}
}
