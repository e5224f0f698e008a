package outbox_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/outbox"
)

func TestCancelledMessageIsNeverDelivered(t *testing.T) {
	t.Parallel()
	f := setup(t)
	dir := t.TempDir()
	m := message("run-c", "debit", "run-c:debit:SUP-07")
	f.queue(t, m)

	won, err := outbox.Cancel(testContext(t), f.kv, m.RunID, m.Key)
	if err != nil || !won {
		t.Fatalf("Cancel = %v, %v; want true", won, err)
	}
	handleAll(t, f.sender(t, outbox.SenderConfig{Transport: outbox.FileTransport{Dir: dir}}), f.cons, 1)

	if got := emlFiles(t, dir); len(got) != 0 {
		t.Errorf("cancelled message delivered: %v", got)
	}
	if mark := f.markOf(t, m); mark != outbox.Cancelled {
		t.Errorf("mark = %q, want cancelled", mark)
	}
	// An interrupted undo that cancels again still learns the message never went.
	if won, err := outbox.Cancel(testContext(t), f.kv, m.RunID, m.Key); err != nil || !won {
		t.Errorf("second Cancel = %v, %v; want true", won, err)
	}
}

func TestCancelLosesToSender(t *testing.T) {
	t.Parallel()
	f := setup(t)
	m := message("run-c", "debit", "run-c:debit:SUP-08")
	f.queue(t, m)
	handleAll(t, f.sender(t, outbox.SenderConfig{Transport: outbox.FileTransport{Dir: t.TempDir()}}), f.cons, 1)

	won, err := outbox.Cancel(testContext(t), f.kv, m.RunID, m.Key)
	if err != nil || won {
		t.Fatalf("Cancel after sending = %v, %v; want false", won, err)
	}
	if mark := f.markOf(t, m); mark != outbox.Sent {
		t.Errorf("mark = %q, want sent", mark)
	}
}

func TestAdmitRefusalDropsTheMessage(t *testing.T) {
	t.Parallel()
	f := setup(t)
	dir := t.TempDir()
	stale := message("run-a", "debit", "run-a:debit:SUP-07")
	current := message("run-a", "debit", "run-a:debit:SUP-07:g1")
	current.Generation = 1
	f.queue(t, stale, current)

	type drop struct{ key, reason string }
	var drops []drop
	s := f.sender(t, outbox.SenderConfig{
		Transport: outbox.FileTransport{Dir: dir},
		Admit: func(_ context.Context, m outbox.Message) (bool, string, error) {
			if m.Generation < 1 {
				return false, "generation 0 is older than the run's 1", nil
			}
			return true, "", nil
		},
		Dropped: func(_ context.Context, m outbox.Message, reason string) {
			drops = append(drops, drop{m.Key, reason})
		},
	})
	handleAll(t, s, f.cons, 2)

	if want := []drop{{stale.Key, "generation 0 is older than the run's 1"}}; !slices.Equal(drops, want) {
		t.Errorf("Dropped calls = %v, want %v", drops, want)
	}
	if got, want := emlFiles(t, dir), []string{sha(current.Key) + ".eml"}; !slices.Equal(got, want) {
		t.Errorf("mail folder holds %v, want only %v", got, want)
	}
	// A dropped message was never handed over: no mark, so a later Cancel still wins.
	if mark := f.markOf(t, stale); mark != "" {
		t.Errorf("dropped message's mark = %q, want none", mark)
	}
}

func TestAdmitErrorRetriesLater(t *testing.T) {
	t.Parallel()
	f := setup(t)
	dir := t.TempDir()
	m := message("run-a", "report", "run-a:report")
	f.queue(t, m)
	errDown := errors.New("checkpoint store unreachable")
	fail := true
	s := f.sender(t, outbox.SenderConfig{
		Transport: outbox.FileTransport{Dir: dir},
		Admit: func(context.Context, outbox.Message) (bool, string, error) {
			if fail {
				return false, "", errDown
			}
			return true, "", nil
		},
	})

	if err := s.Handle(testContext(t), next(t, f.cons)); !errors.Is(err, errDown) {
		t.Fatalf("Handle = %v, want the Admit error", err)
	}
	if mark := f.markOf(t, m); mark != "" {
		t.Errorf("mark after a failed Admit = %q, want none", mark)
	}
	fail = false
	// The message comes back after its NakWithDelay.
	msg := next(t, f.cons)
	if md, err := msg.Metadata(); err != nil || md.NumDelivered != 2 {
		t.Fatalf("redelivered message metadata = %+v, %v; want delivery 2", md, err)
	}
	if err := s.Handle(testContext(t), msg); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	if got := emlFiles(t, dir); len(got) != 1 {
		t.Errorf("mail folder holds %v, want one file", got)
	}
}

func TestUndecodableMessageIsRejected(t *testing.T) {
	t.Parallel()
	f := setup(t)
	dir := t.TempDir()
	if _, err := f.js.Publish(testContext(t), "cairn.outbox.run-x.debit", []byte(`{"key":"run-x:debit:SUP-1"}`)); err != nil {
		t.Fatal(err)
	}
	var rejected []error
	s := f.sender(t, outbox.SenderConfig{
		Transport: outbox.FileTransport{Dir: dir},
		Rejected:  func(_ context.Context, _ jetstream.Msg, reason error) { rejected = append(rejected, reason) },
	})

	err := s.Handle(testContext(t), next(t, f.cons))
	if !errors.Is(err, outbox.ErrInvalid) {
		t.Fatalf("Handle = %v, want ErrInvalid", err)
	}
	if len(rejected) != 1 || !errors.Is(rejected[0], outbox.ErrInvalid) {
		t.Errorf("Rejected calls = %v, want one ErrInvalid", rejected)
	}
	if got := emlFiles(t, dir); len(got) != 0 {
		t.Errorf("rejected message delivered: %v", got)
	}
}

func TestMessageOnTheWrongSubjectIsRejected(t *testing.T) {
	t.Parallel()
	f := setup(t)
	m := message("run-x", "debit", "run-x:debit:SUP-1")
	f.queue(t, m)
	// Copy the queued event onto another run's subject.
	raw, err := f.stream.GetMsg(testContext(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	moved := &nats.Msg{Subject: "cairn.outbox.run-y.debit", Header: raw.Header, Data: raw.Data}
	moved.Header.Del(jetstream.MsgIDHeader)
	if _, err := f.js.PublishMsg(testContext(t), moved); err != nil {
		t.Fatal(err)
	}
	s := f.sender(t, outbox.SenderConfig{Transport: outbox.FileTransport{Dir: t.TempDir()}})
	if err := s.Handle(testContext(t), next(t, f.cons)); err != nil {
		t.Fatalf("Handle of the queued message: %v", err)
	}
	if err := s.Handle(testContext(t), next(t, f.cons)); !errors.Is(err, outbox.ErrInvalid) {
		t.Fatalf("Handle of the moved message = %v, want ErrInvalid", err)
	}
}

func TestNewSenderValidatesConfig(t *testing.T) {
	t.Parallel()
	_, err := outbox.NewSender(outbox.SenderConfig{Timeout: -1})
	if !errors.Is(err, outbox.ErrConfig) {
		t.Fatalf("NewSender = %v, want ErrConfig", err)
	}
	for _, want := range []string{"JS is required", "Transport is required", "Logger is required", "Timeout -1ns is negative"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("NewSender error %q does not say %q", err, want)
		}
	}
}
