package runner

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// runWithHeartbeat runs the step while a heartbeat renews the lease and the message. A
// renewal that finds the lease gone cancels the step at once. The heartbeat stops before the
// commit.
func (r *Runner) runWithHeartbeat(ctx context.Context, m jetstream.Msg, a *Attempt, h *kc.Holder) (*Result, error) {
	stepCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	hb := r.startHeartbeat(stepCtx, cancel, m, a, h)
	res, err := r.cfg.Step.Run(stepCtx, a)
	hb.stop()
	if cause := context.Cause(stepCtx); err != nil && errors.Is(cause, kc.ErrFenced) {
		err = cause
	}
	if err == nil && res == nil {
		res = &Result{}
	}
	return res, err
}

// heartbeat beats from a timer every Heartbeat while the step runs: a step shorter than a
// heartbeat costs no goroutine.
type heartbeat struct {
	mu      sync.Mutex // held by a beat under way, which stop waits for
	stopped bool
	t       *time.Timer
}

func (r *Runner) startHeartbeat(ctx context.Context, cancel context.CancelCauseFunc, m jetstream.Msg, a *Attempt, h *kc.Holder) *heartbeat {
	hb := &heartbeat{}
	hb.mu.Lock()
	defer hb.mu.Unlock()
	hb.t = time.AfterFunc(r.cfg.Heartbeat, func() {
		hb.mu.Lock()
		defer hb.mu.Unlock()
		if hb.stopped || ctx.Err() != nil {
			return
		}
		if !a.hbPaused.Load() {
			_ = m.InProgress()
			if h != nil {
				if err := h.Renew(ctx); err != nil && errors.Is(err, kc.ErrFenced) {
					cancel(err)
					return
				}
			}
		}
		hb.t.Reset(r.cfg.Heartbeat)
	})
	return hb
}

// stop ends the heartbeat; a beat under way finishes first.
func (hb *heartbeat) stop() {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	hb.stopped = true
	hb.t.Stop()
}
