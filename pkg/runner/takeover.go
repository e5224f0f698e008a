package runner

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// OwnerGone asks a lease owner's inbox twice, gap apart: two "no responders" answers, with
// the asker connected throughout, prove the owner gone. A timeout proves nothing.
func OwnerGone(ctx context.Context, nc *nats.Conn, inbox string, gap time.Duration) bool {
	if inbox == "" {
		return false
	}
	ask := func() bool {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := nc.RequestWithContext(rctx, inbox, nil)
		return errors.Is(err, nats.ErrNoResponders)
	}
	reconnects := nc.Stats().Reconnects
	if !ask() {
		return false
	}
	t := time.NewTimer(gap)
	select {
	case <-ctx.Done():
		t.Stop()
		return false
	case <-t.C:
	}
	return ask() && nc.IsConnected() && nc.Stats().Reconnects == reconnects
}

func (r *Runner) ownerGone(ctx context.Context, l *kc.Lease) bool {
	return OwnerGone(ctx, r.cfg.JS.Conn(), l.OwnerInbox, r.cfg.TakeoverGap)
}

func (r *Runner) releaseGone(ctx context.Context, runID string, l kc.Lease) {
	released, err := ReleaseLease(ctx, r.cfg.JS, r.cfg.Store, "/cairn/"+r.cfg.Service, runID, l, "owner "+l.Owner+" gone (no responders)", r.cfg.Now)
	if err != nil {
		r.log.Warn("releasing a dead owner's lease", slog.String("run_id", runID), slog.Any("error", err))
	}
	if released {
		r.m.Reassignments.WithLabelValues(l.Step, "owner_gone").Inc()
		r.log.Info("released a dead owner's lease", slog.String("run_id", runID), slog.String("dead_owner", l.Owner), slog.Uint64("token", l.Token))
	}
}

// ReleaseLease releases a lease whose owner is gone or expired, by compare-and-set on that
// very lease (a renewal in between keeps it), audits it as reassigned, and publishes the
// step's event again with the release's revision as Msg-Id. The step stays in_progress, so
// its next taker knows it restarts. released says whether this call released the lease.
func ReleaseLease(ctx context.Context, js jetstream.JetStream, store *kc.Store, source, runID string, l kc.Lease, why string, now func() time.Time) (released bool, err error) {
	rec, rev, err := store.Mutate(ctx, runID, func(n *kc.Record) error {
		if n.Lease == nil || *n.Lease != l {
			return kc.ErrSkip
		}
		n.Lease = nil
		if n.Index(l.Step) >= 0 { // an undo's lease has no step of the pipeline
			n.Step(l.Step).SetLastError(why)
		}
		return nil
	})
	if errors.Is(err, kc.ErrSkip) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	a := events.Audit{RunID: runID, Step: l.Step, Event: "reassigned", Token: l.Token, Owner: l.Owner, Detail: why}
	e, err := events.New(events.AuditStepID(runID, l.Step, "reassigned", rev), events.TypeAudit, source, runID, now(), a)
	if err == nil {
		if m, err := events.Encode(events.AuditSubject(runID), e); err == nil {
			_, _ = js.PublishMsg(ctx, m)
		}
	}
	if rec.Status != kc.Running {
		return true, nil
	}
	return true, PublishStep(ctx, js, source, runID, l.Step, rec.Generation, rev, now())
}
