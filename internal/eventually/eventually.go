// Package eventually waits on observable state with a deadline: a condition is called, with
// a short backoff, until it holds or the time given to it has passed. It is how tests (and
// the benchmark, which waits on a new cluster) wait, never by sleeping a guessed time.
package eventually

import (
	"errors"
	"fmt"
	"time"
)

// The pause between two calls of a condition starts at firstPause and doubles up to
// maxPause: a condition that holds soon is seen soon, one that takes seconds is not asked
// hundreds of times.
const (
	firstPause = 5 * time.Millisecond
	maxPause   = 100 * time.Millisecond
)

// errFalse is what a condition made by True returns while it does not hold.
var errFalse = errors.New("not yet")

// T is the part of testing.TB that That uses; a *testing.T is one. (An interface, so that
// the benchmark, a part of the cairn binary, does not link package testing.)
type T interface {
	Helper()
	Fatalf(format string, args ...any)
}

// That calls cond until it returns nil; when within has passed first, it fails t with what
// and cond's last error. Call it from the test's goroutine.
func That(t T, within time.Duration, what string, cond func() error) {
	t.Helper()
	if err := Within(within, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Within calls cond until it returns nil, and returns nil then; when within has passed
// first, it returns cond's last error.
func Within(within time.Duration, cond func() error) error {
	deadline := time.Now().Add(within)
	pause := firstPause
	for {
		err := cond()
		if err == nil {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("not within %s: %w", within, err)
		}
		<-time.After(min(pause, left))
		pause = min(2*pause, maxPause)
	}
}

// True is cond as a condition That and Within take: it holds when cond returns true.
func True(cond func() bool) func() error {
	return func() error {
		if cond() {
			return nil
		}
		return errFalse
	}
}
