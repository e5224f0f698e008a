package runner

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/lease"
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
		a.mu.Lock()
		a.extras.fold(res, nil) // a step written as a type may tell them too
		a.mu.Unlock()
		outs, err = r.saveAndVerify(ctx, a, res)
		return err
	})
	return res, outs, err
}

// beating runs fn, work of a leased attempt (Run, and the loop guard and fences before it),
// under the lease's heartbeat (lease.Keep): every Heartbeat the message is kept in progress
// and the lease renewed, but for a stalled attempt; a lease lost meanwhile is its error.
func (r *Runner) beating(ctx context.Context, m jetstream.Msg, a *Attempt, h *kc.Holder, fn func(context.Context) error) error {
	return lease.Keep(ctx, r.cfg.Heartbeat, h, func() bool {
		if a.hbPaused.Load() {
			return false
		}
		_ = m.InProgress()
		return true
	}, fn)
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
	if v := r.hooks.verifier; v != nil {
		err := v.Verify(ctx, a, res)
		var an *anomaly
		if errors.As(err, &an) {
			outs.anomaly = an.Error()
			r.auditStep(a, "verification.anomaly", a.Token.Value, kc.CutText(an.Error(), 400))
			return outs, nil
		}
		if err != nil {
			return outs, fmt.Errorf("%w: %w", ErrVerify, err)
		}
	}
	return outs, nil
}
