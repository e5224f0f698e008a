package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cairnhq/cairn/internal/eventually"
	"github.com/cairnhq/cairn/pkg/consume"
	"github.com/cairnhq/cairn/pkg/outbox"
)

// panicky is a transport with a bug: it panics on delivery.
type panicky struct{}

func (panicky) Deliver(context.Context, outbox.Message, []byte) error {
	var m map[string]int
	m["x"]++
	return nil
}

func (panicky) Delivered(context.Context, outbox.Message) (bool, error) { return false, nil }

// A message whose delivery panics is refused for good (Refused hands its run over) and
// termed, instead of crashing the sender; it is not delivered again.
func TestPanicIsRefused(t *testing.T) {
	f := setup(t)
	refused := make(chan error, 2)
	s := f.sender(t, outbox.SenderConfig{Transport: panicky{}, Refused: func(_ context.Context, _ outbox.Message, err error) { refused <- err }})
	f.queue(t, message("run-1", "report", "run-1:report"))
	if err := s.Handle(testContext(t), next(t, f.cons)); !errors.Is(err, consume.ErrPanic) {
		t.Fatalf("Handle = %v, want ErrPanic", err)
	}
	select {
	case err := <-refused:
		if !errors.Is(err, consume.ErrPanic) {
			t.Fatalf("Refused with %v, want ErrPanic", err)
		}
	default:
		t.Fatal("the message whose delivery panicked was not refused")
	}
	eventually.That(t, 30*time.Second, "consumer: want the message termed", func() error {
		info, err := f.cons.Info(testContext(t))
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending != 0 || info.NumPending != 0 {
			return fmt.Errorf("%d pending ack, %d pending", info.NumAckPending, info.NumPending)
		}
		return nil
	})
}
