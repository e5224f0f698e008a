package retry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cairnhq/cairn/pkg/retry"
)

func TestBaseGrowsToTheCap(t *testing.T) {
	t.Parallel()
	p := retry.Policy{First: 100 * time.Millisecond, Max: 5 * time.Second}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 3200 * time.Millisecond, 5 * time.Second, 5 * time.Second}
	for n, w := range want {
		if got := p.Base(n); got != w {
			t.Errorf("Base(%d) = %s, want %s", n, got, w)
		}
	}
	if got := p.Base(1 << 20); got != 5*time.Second {
		t.Errorf("Base(1<<20) = %s, want the cap", got)
	}
	if got := (retry.Policy{First: time.Second}).Base(200); got <= 0 {
		t.Errorf("uncapped Base(200) = %s, want no overflow", got)
	}
	if got := (retry.Policy{First: time.Second, Factor: 3}).Base(2); got != 9*time.Second {
		t.Errorf("factor 3: Base(2) = %s, want 9s", got)
	}
}

func TestDelayStaysWithinItsBounds(t *testing.T) {
	t.Parallel()
	p := retry.Policy{First: time.Second, Max: 30 * time.Second, Jitter: 0.1}
	for n := range 8 {
		lo, hi := p.Bounds(n)
		b := p.Base(n)
		if lo != b-b/10 || hi != min(b+b/10, 30*time.Second) {
			t.Errorf("Bounds(%d) = %s, %s; base %s", n, lo, hi, b)
		}
		seen := map[time.Duration]bool{}
		for range 200 {
			d := p.Delay(n)
			if d < lo || d > hi {
				t.Fatalf("Delay(%d) = %s, outside %s–%s", n, d, lo, hi)
			}
			seen[d] = true
		}
		if len(seen) < 2 {
			t.Errorf("Delay(%d) drew %d distinct waits in 200: no jitter", n, len(seen))
		}
	}
}

func TestRandFixesTheJitter(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		r    float64
		want time.Duration
	}{{0, 900 * time.Millisecond}, {0.5, time.Second}, {0.999999, 1100 * time.Millisecond}} {
		p := retry.Policy{First: time.Second, Jitter: 0.1, Rand: func() float64 { return tt.r }}
		if got := p.Delay(0); got.Round(time.Millisecond) != tt.want {
			t.Errorf("Rand %g: Delay(0) = %s, want %s", tt.r, got, tt.want)
		}
	}
	// At the cap the jitter draws below it, never above.
	p := retry.Policy{First: time.Second, Max: time.Second, Jitter: 0.1, Rand: func() float64 { return 0.999999 }}
	if got := p.Delay(3); got > time.Second || got < 900*time.Millisecond {
		t.Errorf("capped Delay(3) = %s, want within 900ms–1s", got)
	}
}

func TestDoRetriesOnlyWhatIsTemporary(t *testing.T) {
	t.Parallel()
	p := retry.Policy{First: time.Millisecond, Tries: 3}
	calls := 0
	err := p.Do(t.Context(), retry.IsTemporary, func(try int) error {
		if try != calls {
			t.Errorf("try %d on call %d", try, calls)
		}
		calls++
		return retry.Temporary(errors.New("busy"))
	})
	if calls != 3 || !retry.IsTemporary(err) {
		t.Errorf("%d calls, error %v: want 3 calls and the last temporary error", calls, err)
	}

	calls = 0
	permanent := errors.New("no such account")
	if err := p.Do(t.Context(), retry.IsTemporary, func(int) error { calls++; return permanent }); calls != 1 || err != permanent {
		t.Errorf("%d calls, error %v: want 1 call", calls, err)
	}

	calls = 0
	if err := p.Do(t.Context(), retry.IsTemporary, func(try int) error {
		calls++
		if try == 1 {
			return nil
		}
		return retry.ErrTemporary
	}); err != nil || calls != 2 {
		t.Errorf("%d calls, error %v: want success on the second", calls, err)
	}
}

func TestDoStopsWithItsContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	p := retry.Policy{First: time.Hour} // no Tries: until ctx ends
	err := p.Do(ctx, retry.IsTemporary, func(int) error { cancel(); return retry.ErrTemporary })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
}

// Within bounds the retries from the first failure: a wait that would end past it is not
// made, and the last error is returned (not a context's), without asking retryable.
func TestDoStopsWithin(t *testing.T) {
	t.Parallel()
	asked := 0
	retryable := func(err error) bool { asked++; return retry.IsTemporary(err) }
	calls := 0
	p := retry.Policy{First: time.Hour, Within: time.Minute}
	err := p.Do(t.Context(), retryable, func(int) error { calls++; return retry.Temporary(errors.New("down")) })
	if calls != 1 || asked != 0 || !retry.IsTemporary(err) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%d calls, %d asked, error %v: want one call and its error", calls, asked, err)
	}
	calls = 0
	p = retry.Policy{First: time.Millisecond, Factor: 1, Within: time.Hour, Tries: 4}
	if err := p.Do(t.Context(), retry.IsTemporary, func(int) error { calls++; return retry.ErrTemporary }); calls != 4 || err == nil {
		t.Errorf("%d calls, error %v: want Tries to end it within a long Within", calls, err)
	}
}

func TestTemporaryMarks(t *testing.T) {
	t.Parallel()
	base := errors.New("connection reset")
	err := fmt.Errorf("posting: %w", retry.Temporary(base))
	if !errors.Is(err, retry.ErrTemporary) || !errors.Is(err, base) || err.Error() != "posting: connection reset" {
		t.Errorf("%v: want both the mark and the cause, reading as the cause", err)
	}
	if retry.Temporary(nil) != retry.ErrTemporary {
		t.Error("Temporary(nil) is not ErrTemporary")
	}
	if retry.IsTemporary(base) {
		t.Error("an unmarked error is temporary")
	}
}
