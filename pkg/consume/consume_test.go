package consume_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/eventually"
	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/pkg/consume"
)

// setup makes a stream and a durable on it and returns the durable.
func setup(t *testing.T) (jetstream.JetStream, jetstream.Consumer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := natstest.JetStream(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "WORK", Subjects: []string{"work.>"}}); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateConsumer(ctx, "WORK", jetstream.ConsumerConfig{Durable: "step", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	return js, cons
}

// start runs consume.Run in the background; the returned channel has its result.
func start(ctx context.Context, cons jetstream.Consumer, handle jetstream.MessageHandler, opts ...consume.Option) <-chan error {
	done := make(chan error, 1)
	go func() { done <- consume.Run(ctx, cons, handle, opts...) }()
	return done
}

// wait returns Run's result, failing the test if it does not come within a minute.
func wait(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("Run did not return within a minute")
		return nil
	}
}

// handled publishes n messages and waits until the handler has seen them, so the loop is
// known to be consuming.
func handled(t *testing.T, js jetstream.JetStream, seen <-chan string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range n {
		if _, err := js.Publish(ctx, fmt.Sprintf("work.%d", i), []byte("job")); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		select {
		case <-seen:
		case <-ctx.Done():
			t.Fatal("the handler did not get the messages within a minute")
		}
	}
}

// A durable deleted under a running loop ends it with an error that names the consumer
// and its stream and wraps ErrEnded and the cause; Ended hears of it first. Whenever the
// deletion comes: while the loop's pull waits (the server answers 409 Consumer Deleted),
// while the handler is busy (the next pull meets no responders), or just as the loop pulls
// again (its pull is never answered: the missed heartbeats make Run ask for the consumer,
// here after 2s, by default after 30s).
func TestRunEndsWhenItsDurableIsDeleted(t *testing.T) {
	for _, when := range []string{"waiting", "busy", "pulling again"} {
		t.Run(when, func(t *testing.T) {
			js, cons := setup(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			seen := make(chan string, 10)
			inHand, release := make(chan struct{}), make(chan struct{})
			handle := func(m jetstream.Msg) {
				if m.Subject() == "work.busy" {
					close(inHand)
					<-release
				}
				_ = m.Ack()
				seen <- m.Subject()
			}
			var told error
			endedCalled := make(chan struct{})
			done := start(ctx, cons, handle, consume.Pull(jetstream.PullMaxMessages(1), jetstream.PullExpiry(2*time.Second)),
				consume.Ended(func(err error) { told = err; close(endedCalled) }))
			handled(t, js, seen, 2)
			switch when {
			case "waiting":
				waitPulling(t, cons)
			case "busy":
				if _, err := js.Publish(ctx, "work.busy", []byte("job")); err != nil {
					t.Fatal(err)
				}
				<-inHand
			}
			if err := js.DeleteConsumer(ctx, "WORK", "step"); err != nil {
				t.Fatal(err)
			}
			if when == "busy" {
				close(release)
			}
			err := wait(t, done)
			if !errors.Is(err, consume.ErrEnded) {
				t.Fatalf("Run: %v, want ErrEnded", err)
			}
			if !errors.Is(err, jetstream.ErrConsumerDeleted) && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				t.Fatalf("Run: %v, want it to wrap ErrConsumerDeleted or ErrConsumerNotFound", err)
			}
			for _, name := range []string{`"step"`, `"WORK"`} {
				if !strings.Contains(err.Error(), name) {
					t.Fatalf("Run: %q does not name %s", err, name)
				}
			}
			select {
			case <-endedCalled:
			default:
				t.Fatal("Ended was not called")
			}
			if told == nil || told.Error() != err.Error() {
				t.Fatalf("Ended heard %v, Run returned %v", told, err)
			}
		})
	}
}

// waitPulling waits until the durable has a pull request waiting.
func waitPulling(t *testing.T, cons jetstream.Consumer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	eventually.That(t, time.Minute, "a pull request waiting", func() error {
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumWaiting == 0 {
			return errors.New("none")
		}
		return nil
	})
}

// A stop by ctx is clean: nil, and Ended is not called; with Drain the message in hand is
// finished.
func TestRunStopsCleanly(t *testing.T) {
	js, cons := setup(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	seen := make(chan string, 10)
	inHand, release := make(chan struct{}), make(chan struct{})
	acked := make(chan error, 1)
	handle := func(m jetstream.Msg) {
		if m.Subject() == "work.last" {
			close(inHand)
			<-release
			acked <- m.DoubleAck(context.Background())
			return
		}
		_ = m.Ack()
		seen <- m.Subject()
	}
	done := start(ctx, cons, handle, consume.Drain(), consume.StopWithin(time.Minute),
		consume.Ended(func(err error) { t.Errorf("Ended called on a clean stop: %v", err) }))
	handled(t, js, seen, 2)
	if _, err := js.Publish(ctx, "work.last", []byte("job")); err != nil {
		t.Fatal(err)
	}
	<-inHand
	stop()
	close(release)
	if err := wait(t, done); err != nil {
		t.Fatalf("Run after a stop: %v, want nil", err)
	}
	if err := <-acked; err != nil {
		t.Fatalf("the message in hand during the drain: ack %v", err)
	}
	qctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := cons.Info(qctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 0 || info.NumPending != 0 {
		t.Fatalf("after the stop: %d unacknowledged, %d pending, want 0 and 0", info.NumAckPending, info.NumPending)
	}
}

// A consumer that cannot even start consuming is an error, not an end.
func TestRunStartError(t *testing.T) {
	_, cons := setup(t)
	err := consume.Run(context.Background(), cons, nil)
	if err == nil || errors.Is(err, consume.ErrEnded) {
		t.Fatalf("Run with no handler: %v, want an error that is not ErrEnded", err)
	}
}
