package consume_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/eventually"
	"github.com/cairnhq/cairn/pkg/consume"
)

// A handler that panics: Recover hands settle an ErrPanic naming the value, terms the
// message (it is not delivered again), and the loop goes on with the next one.
func TestRecoverTermsAndRecords(t *testing.T) {
	js, cons := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	settled := make(chan error, 4)
	seen := make(chan string, 4)
	handle := func(m jetstream.Msg) {
		defer consume.Recover(slog.New(slog.DiscardHandler), m, func(err error) { settled <- err })
		seen <- m.Subject()
		if m.Subject() == "work.bad" {
			panic("a bug")
		}
		_ = m.Ack()
	}
	done := start(ctx, cons, handle)
	for _, subj := range []string{"work.bad", "work.good"} {
		if _, err := js.Publish(ctx, subj, []byte("job")); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"work.bad", "work.good"} {
		select {
		case got := <-seen:
			if got != want {
				t.Fatalf("handled %s, want %s (the panicking message delivered again?)", got, want)
			}
		case <-ctx.Done():
			t.Fatalf("%s not handled", want)
		}
	}
	select {
	case err := <-settled:
		if !errors.Is(err, consume.ErrPanic) {
			t.Fatalf("settle got %v, want ErrPanic", err)
		}
	case <-ctx.Done():
		t.Fatal("settle not called")
	}
	eventually.That(t, time.Minute, "consumer: want both settled once", func() error {
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending != 0 || info.NumPending != 0 || info.NumRedelivered != 0 {
			return fmt.Errorf("%d pending ack, %d pending, %d redelivered", info.NumAckPending, info.NumPending, info.NumRedelivered)
		}
		return nil
	})
	cancel()
	if err := wait(t, done); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if len(settled) != 0 {
		t.Fatalf("settle called again: %v", <-settled)
	}
}
