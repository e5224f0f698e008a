package runner

import (
	"context"
	"log/slog"

	"github.com/cairnhq/cairn/internal/handover"
)

// readBack is what p read back of the stopped step's own writes, for its handover note
// (nil: unknown).
func (p *Progress) readBack() *handover.ReadBack {
	if p == nil {
		return nil
	}
	return &handover.ReadBack{Keys: p.Keys, Messages: p.Messages, Standing: p.Standing, Where: p.Where, Next: p.Next}
}

// stepProgress is what the attempt's step made durable, for its handover note: the loop
// guard's count if it counted, else counted now (a handover is rare); nil when the step
// has no counter or the count failed.
func (r *Runner) stepProgress(ctx context.Context, a *Attempt) *Progress {
	if a.progress != nil {
		return a.progress
	}
	pc, ok := r.counter()
	if !ok {
		return nil
	}
	p, err := r.count(ctx, pc, a)
	if err != nil {
		a.log.Warn("the handover note could not read back the step's writes", slog.Any("error", err))
		return nil
	}
	return &p
}
