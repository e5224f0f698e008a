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
		if got := backoffFor(tt.delivered); got != tt.want {
			t.Errorf("backoffFor(%d) = %s, want %s", tt.delivered, got, tt.want)
		}
	}
}
