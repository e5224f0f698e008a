package runner

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// runWithHeartbeat runs the step while a ticker renews the lease and the message. A renewal
// that finds the lease gone cancels the step at once. The heartbeat stops before the commit.
func (r *Runner) runWithHeartbeat(ctx context.Context, m jetstream.Msg, a *Attempt, h *kc.Holder) (*Result, error) {
	stepCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(r.cfg.Heartbeat)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-stepCtx.Done():
				return
			case <-t.C:
			}
			if a.hbPaused.Load() {
				continue
			}
			_ = m.InProgress()
			if h == nil {
				continue
			}
			if err := h.Renew(stepCtx); err != nil && errors.Is(err, kc.ErrFenced) {
				cancel(err)
				return
			}
		}
	}()
	res, err := r.cfg.Step.Run(stepCtx, a)
	close(stop)
	wg.Wait()
	if cause := context.Cause(stepCtx); err != nil && errors.Is(cause, kc.ErrFenced) {
		err = cause
	}
	if err == nil && res == nil {
		res = &Result{}
	}
	return res, err
}
