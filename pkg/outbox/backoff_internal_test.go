package outbox

import (
	"testing"
	"time"
)

func TestBackoffGrowsToFiveSeconds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		delivered uint64
		want      time.Duration
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
		if got, want := backoffFor(tt.delivered, 300*time.Millisecond), min(tt.want, 300*time.Millisecond); got != want {
			t.Errorf("backoffFor(%d, 300ms) = %s, want %s", tt.delivered, got, want)
		}
		if got := backoffFor(tt.delivered, 5*time.Second); got != tt.want {
			t.Errorf("backoffFor(%d) = %s, want %s", tt.delivered, got, tt.want)
		}
	}
}
