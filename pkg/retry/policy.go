package retry

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"
)

// Policy is a schedule of waits between tries. The zero Factor is 2; a zero Max does not
// cap; a zero Jitter waits exactly the base.
type Policy struct {
	First  time.Duration // the wait after the first failed try
	Factor float64       // each wait is this many times the one before; default 2
	Max    time.Duration // no wait is longer, jitter included; 0: no cap
	Jitter float64       // each wait is drawn evenly within ±Jitter of its base (0.1: ±10%)
	Tries  int           // the most tries Do makes; 0: until ctx ends
	// Within bounds how long Do keeps trying, from the first failed try: it makes no wait
	// that would end later, and returns the last error instead. 0: no bound.
	Within time.Duration
	// Rand draws the jitter, evenly in [0, 1); nil is math/rand/v2's Float64. Tests fix it.
	Rand func() float64
}

// Base is the n-th wait (n from 0) before jitter: First × Factor^n, at most Max.
func (p Policy) Base(n int) time.Duration {
	f := p.Factor
	if f == 0 {
		f = 2
	}
	d := float64(p.First) * math.Pow(f, float64(max(n, 0)))
	if p.Max > 0 && d >= float64(p.Max) {
		return p.Max
	}
	if d >= math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(d)
}

// Bounds is the range the n-th wait is drawn from: Base(n) ± Jitter, at most Max.
func (p Policy) Bounds(n int) (lo, hi time.Duration) {
	b := float64(p.Base(n))
	lo, hi = time.Duration(b*(1-p.Jitter)), time.Duration(b*(1+p.Jitter))
	if p.Max > 0 {
		hi = min(hi, p.Max)
	}
	return lo, hi
}

// Delay is the n-th wait (n from 0), drawn within Bounds(n).
func (p Policy) Delay(n int) time.Duration {
	lo, hi := p.Bounds(n)
	if hi <= lo {
		return lo
	}
	r := rand.Float64
	if p.Rand != nil {
		r = p.Rand
	}
	return lo + time.Duration(r()*float64(hi-lo))
}

// Do calls fn (with the try number, from 0) until it returns nil or an error retryable
// does not accept, or Tries tries failed, or the next wait would end past Within, waiting
// Delay(try) after each failed try; retryable is asked only when a try remains, so it may
// count the retries. It returns fn's last error, or ctx's error when ctx ends during a wait.
func (p Policy) Do(ctx context.Context, retryable func(error) bool, fn func(try int) error) error {
	var deadline time.Time
	for try := 0; ; try++ {
		err := fn(try)
		if err == nil || (p.Tries > 0 && try+1 >= p.Tries) {
			return err
		}
		d := p.Delay(try)
		if p.Within > 0 {
			if try == 0 {
				deadline = time.Now().Add(p.Within)
			}
			if time.Now().Add(d).After(deadline) {
				return err
			}
		}
		if !retryable(err) {
			return err
		}
		if werr := wait(ctx, d); werr != nil {
			return werr
		}
	}
}

// Wait waits Delay(n), or until ctx ends (its error).
func (p Policy) Wait(ctx context.Context, n int) error { return wait(ctx, p.Delay(n)) }

func wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// String says the policy for a person: "100ms, ×2 up to 5s, ±10%".
func (p Policy) String() string {
	f := p.Factor
	if f == 0 {
		f = 2
	}
	s := p.First.String() + ", ×" + strconv.FormatFloat(f, 'g', -1, 64)
	if p.Max > 0 {
		s += " up to " + p.Max.String()
	}
	if p.Jitter > 0 {
		s += fmt.Sprintf(", ±%g%%", math.Round(p.Jitter*1000)/10)
	}
	if p.Tries > 0 {
		s += fmt.Sprintf(", %d tries", p.Tries)
	}
	return s
}
