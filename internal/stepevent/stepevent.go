// Package stepevent is the one home of the events that schedule a run's steps on
// CAIRN_STEPS (a space's cairn.step.<step>.<run_id>): the runner publishes the next step's
// after a commit, the supervisor one that was lost, a resumed or rerun run's first, and a
// lease taken over; the compensator one a run waits for after its undo left it.
//
// An event's Msg-Id is <run>:<step>:ready:<rev> (events.StepReadyID), rev being the revision
// of the record write that scheduled it, so the same schedule published twice within the
// stream's duplicate window is stored once, and a later write schedules anew.
package stepevent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/tracing"
)

// Publish publishes a step's event with Msg-Id <run>:<step>:ready:<rev>, rev being the
// revision of the write that scheduled it, and waits for the stream's ack.
func Publish(ctx context.Context, js jetstream.JetStream, sp assets.Space, source, runID, step string, generation int, rev uint64, now time.Time) error {
	_, err := PublishAck(ctx, js, sp, source, runID, step, generation, rev, now)
	return err
}

// PublishAck is Publish that also says whether the stream dropped the event as a duplicate
// of one published under the same Msg-Id within its window. The event carries the trace
// context of ctx (or the run's own trace) in its traceparent.
func PublishAck(ctx context.Context, js jetstream.JetStream, sp assets.Space, source, runID, step string, generation int, rev uint64, now time.Time) (duplicate bool, err error) {
	m, err := Msg(ctx, sp, source, runID, step, generation, rev, 0, now)
	if err != nil {
		return false, err
	}
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		return false, fmt.Errorf("publishing step event %q: %w", m.Header.Get(jetstream.MsgIDHeader), err)
	}
	return ack.Duplicate, nil
}

// Msg is a step's event, ready to publish; vouched is rev when the publisher vouches for
// the source (the runner's drift check), else 0.
func Msg(ctx context.Context, sp assets.Space, source, runID, step string, generation int, rev, vouched uint64, now time.Time) (*nats.Msg, error) {
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

// Stored reports whether an event for the run's step waits on CAIRN_STEPS.
func Stored(ctx context.Context, js jetstream.JetStream, sp assets.Space, runID, step string) (bool, error) {
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
