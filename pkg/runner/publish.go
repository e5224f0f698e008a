package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/tracing"
)

// PublishStep publishes a step's event with Msg-Id <run>:<step>:ready:<rev>, rev being the
// revision of the write that scheduled it, and waits for the stream's ack.
func PublishStep(ctx context.Context, js jetstream.JetStream, sp assets.Space, source, runID, step string, generation int, rev uint64, now time.Time) error {
	_, err := PublishStepAck(ctx, js, sp, source, runID, step, generation, rev, now)
	return err
}

// PublishStepAck is PublishStep that also says whether the stream dropped the event as a
// duplicate of one published under the same Msg-Id within its window. The event carries the
// trace context of ctx (or the run's own trace) in its traceparent.
func PublishStepAck(ctx context.Context, js jetstream.JetStream, sp assets.Space, source, runID, step string, generation int, rev uint64, now time.Time) (duplicate bool, err error) {
	m, err := stepMsg(ctx, sp, source, runID, step, generation, rev, 0, now)
	if err != nil {
		return false, err
	}
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		return false, fmt.Errorf("publishing step event %q: %w", m.Header.Get(jetstream.MsgIDHeader), err)
	}
	return ack.Duplicate, nil
}

// stepMsg is a step's event, ready to publish; vouched is rev when the publisher vouches
// for the source (drift.go), else 0.
func stepMsg(ctx context.Context, sp assets.Space, source, runID, step string, generation int, rev, vouched uint64, now time.Time) (*nats.Msg, error) {
	id := events.StepReadyID(runID, step, rev)
	e, err := events.New(id, events.TypeStepReady, source, runID, now, events.StepReady{RunID: runID, Step: step, Generation: generation, Vouched: vouched})
	if err != nil {
		return nil, fmt.Errorf("building step event %q: %w", id, err)
	}
	tracing.Inject(ctx, &e)
	m, err := events.Encode(sp.Step(step, runID), e)
	if err != nil {
		return nil, fmt.Errorf("encoding step event %q: %w", id, err)
	}
	return m, nil
}

// StepEventStored reports whether an event for the run's step waits on CAIRN_STEPS.
func StepEventStored(ctx context.Context, js jetstream.JetStream, sp assets.Space, runID, step string) (bool, error) {
	s, err := js.Stream(ctx, sp.Stream(assets.StreamSteps))
	if err != nil {
		return false, err
	}
	_, err = s.GetLastMsgForSubject(ctx, sp.Step(step, runID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	return err == nil, err
}

func (r *Runner) publishStep(ctx context.Context, runID, step string, generation int, rev uint64) error {
	return PublishStep(ctx, r.cfg.JS, r.cfg.Space, "/cairn/"+r.cfg.Service, runID, step, generation, rev, r.cfg.Now())
}

// publishStepAsync publishes a step's event as publishStep does, without waiting for its
// ack; vouched as stepMsg's.
func (r *Runner) publishStepAsync(ctx context.Context, runID, step string, generation int, rev, vouched uint64) (jetstream.PubAckFuture, error) {
	m, err := stepMsg(ctx, r.cfg.Space, "/cairn/"+r.cfg.Service, runID, step, generation, rev, vouched, r.cfg.Now())
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
