package lease

import (
	"context"
	"errors"
	"sync"
	"time"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// Keep runs work under the heartbeat: every `every` it calls tick (the message's
// InProgress) and renews h, unless tick says to skip the beat (a stalled attempt); h nil (a
// lease-free step) renews nothing. A renewal that finds the lease fenced cancels work's
// context at once, and kvcheckpoint.ErrFenced is then Keep's error. The heartbeat has
// stopped, a beat under way finished, when Keep returns: before the commit.
func Keep(ctx context.Context, every time.Duration, h *kc.Holder, tick func() bool, work func(context.Context) error) error {
	bctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := Every(every, func() bool {
		if bctx.Err() != nil {
			return false
		}
		if !tick() || h == nil {
			return true
		}
		if err := h.Renew(bctx); err != nil && errors.Is(err, kc.ErrFenced) {
			cancel(err)
			return false
		}
		return true
	})
	err := work(bctx)
	stop()
	if cause := context.Cause(bctx); err != nil && errors.Is(cause, kc.ErrFenced) {
		err = cause
	}
	return err
}

// Every calls beat every d, from a timer, until beat returns false or stop is called; stop
// waits for a beat under way. Work shorter than d costs no goroutine.
func Every(d time.Duration, beat func() bool) (stop func()) {
	var (
		mu      sync.Mutex // held by a beat under way
		stopped bool
		t       *time.Timer
	)
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(d, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped || !beat() {
			return
		}
		t.Reset(d)
	})
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}
