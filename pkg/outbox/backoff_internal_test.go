package outbox

import (
	"testing"
	"time"
)

func TestBackoffGrowsToFiveSeconds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		delivered uint64
		want      time.Duration // the wait before jitter
	}{
		{0, 100 * time.Millisecond},
		{1, 100 * time.Millisecond},
		{2, 200 * time.Millisecond},
		{3, 400 * time.Millisecond},
		{6, 3200 * time.Millisecond},
		{7, 5 * time.Second},
		{20, 5 * time.Second},
		{1 << 62, 5 * time.Second},
	}
	for _, tt := range tests {
		for _, hi := range []time.Duration{300 * time.Millisecond, 5 * time.Second} {
			base := min(tt.want, hi)
			// ±10%, never past the cap.
			lo, top := base-base/10, min(base+base/10, hi)
			for range 50 {
				if got := backoffFor(tt.delivered, hi); got < lo || got > top {
					t.Fatalf("backoffFor(%d, %s) = %s, want within %s–%s", tt.delivered, hi, got, lo, top)
				}
			}
		}
	}
}
