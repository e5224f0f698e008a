package runner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// runWithHeartbeat runs the step, stores its outputs and verifies them (points 6 to 8, and
// the store of 9) while a heartbeat renews the lease and the message. A renewal that finds
// the lease gone cancels the step at once. The heartbeat stops before the commit.
func (r *Runner) runWithHeartbeat(ctx context.Context, m jetstream.Msg, a *Attempt, h *kc.Holder) (*Result, outputs, error) {
	var (
		res  *Result
		outs outputs
	)
	err := r.beating(ctx, m, a, h, func(ctx context.Context) error {
		var err error
		if res, err = r.cfg.Step.Run(ctx, a); err != nil {
			return err
		}
		if res == nil {
			res = &Result{}
		}
		outs, err = r.saveAndVerify(ctx, a, res)
		return err
	})
	return res, outs, err
}

// beating runs fn, work of a leased attempt (Run, and the loop guard and fences before it),
// under the heartbeat; a lease lost meanwhile is its error.
func (r *Runner) beating(ctx context.Context, m jetstream.Msg, a *Attempt, h *kc.Holder, fn func(context.Context) error) error {
	bctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	hb := r.startHeartbeat(bctx, cancel, m, a, h)
	err := fn(bctx)
	hb.stop()
	if cause := context.Cause(bctx); err != nil && errors.Is(cause, kc.ErrFenced) {
		err = cause
	}
	return err
}

// saveAndVerify stores the step's outputs, then hands Verify the result: the step checks
// what its commit will point at (the bytes the store took, under their digest; the next step
// that reads them checks that digest again), after it is stored. A difference is ErrVerify,
// naming what did not hold.
func (r *Runner) saveAndVerify(ctx context.Context, a *Attempt, res *Result) (outputs, error) {
	outs, err := r.saveOutputs(ctx, a, res)
	if err != nil {
		return outs, err
	}
	if v, ok := r.cfg.Step.(Verifier); ok {
		if err := v.Verify(ctx, a, res); err != nil {
			return outs, fmt.Errorf("%w: %w", ErrVerify, err)
		}
	}
	return outs, nil
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
