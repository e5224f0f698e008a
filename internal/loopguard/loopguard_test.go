package loopguard

import (
	"testing"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

func TestNext(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		prev  *kc.Progress
		step  string
		count int
		want  kc.Progress
	}{
		{"first count", nil, "s", 0, kc.Progress{Step: "s", NoProgress: 1}},
		{"first count with progress", nil, "s", 2, kc.Progress{Step: "s", Count: 2}},
		{"more made", &kc.Progress{Step: "s", Count: 2, NoProgress: 2}, "s", 3, kc.Progress{Step: "s", Count: 3}},
		{"none more", &kc.Progress{Step: "s", Count: 2, NoProgress: 1}, "s", 2, kc.Progress{Step: "s", Count: 2, NoProgress: 2}},
		{"not counted", &kc.Progress{Step: "s", Count: 2}, "s", -1, kc.Progress{Step: "s", Count: 2, NoProgress: 1}},
		{"another step", &kc.Progress{Step: "a", Count: 9, NoProgress: 2}, "s", 1, kc.Progress{Step: "s", Count: 1}},
	}
	for _, tt := range tests {
		if got := Next(tt.prev, tt.step, tt.count); got != tt.want {
			t.Errorf("%s: Next = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestAttempts(t *testing.T) {
	t.Parallel()
	for _, guard := range []int{1, 3, 5} {
		if got := Attempts(guard, false); got != guard {
			t.Errorf("Attempts(%d, false) = %d, want %d", guard, got, guard)
		}
		if got := Attempts(guard, true); got != guard+1 {
			t.Errorf("Attempts(%d, true) = %d, want %d", guard, got, guard+1)
		}
	}
}
