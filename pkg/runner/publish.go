package runner

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/stepevent"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

func (r *Runner) publishStep(ctx context.Context, runID, step string, generation int, rev uint64) error {
	return stepevent.Publish(ctx, r.cfg.JS, r.cfg.Space, "/cairn/"+r.cfg.Service, runID, step, generation, rev, r.cfg.Now())
}

// publishStepAsync publishes a step's event as publishStep does, without waiting for its
// ack; vouched as stepevent.Msg's.
func (r *Runner) publishStepAsync(ctx context.Context, runID, step string, generation int, rev, vouched uint64) (jetstream.PubAckFuture, error) {
	m, err := stepevent.Msg(ctx, r.cfg.Space, "/cairn/"+r.cfg.Service, runID, step, generation, rev, vouched, r.cfg.Now())
	if err != nil {
		return nil, err
	}
	f, err := r.cfg.JS.PublishMsgAsync(m)
	if err != nil {
		return nil, fmt.Errorf("publishing step event %q: %w", m.Header.Get(jetstream.MsgIDHeader), err)
	}
	return f, nil
}

// publishNextIfIdle re-publishes the events of the steps a verified one lets run when they
// are still pending with no lease (a duplicate is harmless).
func (r *Runner) publishNextIfIdle(ctx context.Context, rec *kc.Record, rev uint64) {
	if rec.Status != kc.Running || rec.Lease != nil {
		return
	}
	for _, next := range rec.Unblocked(r.cfg.StepName) {
		if rec.Step(next).Status == kc.Pending {
			_ = r.publishStep(ctx, rec.RunID, next, rec.Generation, rev)
		}
	}
}

// ackWatch is how long watchAcks waits for an ack.
const ackWatch = 10 * time.Second

// watchAcks logs any of acks that fails or has no answer within ackWatch: publishes that a
// step's message is settled without waiting for. It holds one of the runner's unacked slots
// until they are answered, so an attempt waits here when the server has fallen that far
// behind; Run waits for every slot before it returns.
func (r *Runner) watchAcks(log *slog.Logger, acks []jetstream.PubAckFuture) {
	if len(acks) == 0 {
		return
	}
	r.unacked <- struct{}{}
	go func() {
		defer func() { <-r.unacked }()
		ctx, cancel := context.WithTimeout(context.Background(), ackWatch)
		defer cancel()
		for _, f := range acks {
			var err error
			select {
			case <-f.Ok():
				continue
			case err = <-f.Err():
			case <-ctx.Done():
				err = fmt.Errorf("no ack within %s", ackWatch)
			}
			log.Warn("a publish the step did not wait for was not stored", slog.String("subject", f.Msg().Subject),
				slog.String("id", f.Msg().Header.Get(jetstream.MsgIDHeader)), slog.Any("error", err))
		}
	}()
}
