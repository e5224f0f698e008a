package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/mail"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/cairnhq/cairn/internal/eventually"
	"github.com/cairnhq/cairn/pkg/outbox"
)

func TestSMTPSenderRunDeliversOncePerKey(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ms := startMailServer(t)
	run := "run-2026-10-13-ldh"
	msgs := []outbox.Message{
		message(run, "debit", run+":debit:SUP-07"),
		message(run, "debit", run+":debit:SUP-11"),
		message(run, "report", run+":report"),
	}
	msgs[2].To = []string{"Finance Head <head@example.com>", "audit@example.com"}
	f.queue(t, msgs...)

	// Every mark write is reported; the run is done when every message is sent.
	markedCh := make(chan struct{}, 16)
	s := f.sender(t, outbox.SenderConfig{
		Transport: outbox.SMTPTransport{Addr: ms.addr},
		Marked:    func(context.Context, string) { markedCh <- struct{}{} },
	})
	ctx, cancel := context.WithCancel(testContext(t))
	runErr := make(chan error, 1)
	go func() { runErr <- s.Run(ctx) }()

	allSent := func() bool {
		for _, m := range msgs {
			if f.markOf(t, m) != outbox.Sent {
				return false
			}
		}
		return true
	}
	deadline := testContext(t)
	for !allSent() {
		select {
		case <-markedCh:
		case <-deadline.Done():
			t.Fatal("messages not all marked sent in time")
		}
	}
	cancel()
	select {
	case err := <-runErr:
		if err != nil {
			t.Fatalf("Run = %v, want nil on a clean stop", err)
		}
	case <-deadline.Done():
		t.Fatal("Run did not return after its context ended")
	}

	got := ms.mails()
	if len(got) != len(msgs) {
		t.Fatalf("server received %d messages, want %d", len(got), len(msgs))
	}
	byKey := map[string]receivedMail{}
	for _, r := range got {
		byKey[cairnKey(t, r.Data)] = r
	}
	for _, m := range msgs {
		r, ok := byKey[m.Key]
		if !ok {
			t.Errorf("server never received %q", m.Key)
			continue
		}
		parsed, err := mail.ReadMessage(bytes.NewReader(r.Data))
		if err != nil {
			t.Fatal(err)
		}
		if got := parsed.Header.Get("Message-Id"); got != outbox.MessageID(m.Key) {
			t.Errorf("%s Message-ID = %q, want %q", m.Key, got, outbox.MessageID(m.Key))
		}
		if r.From != "cairn@example.com" {
			t.Errorf("%s MAIL FROM = %q, want the bare address", m.Key, r.From)
		}
		var wantTo []string
		for _, to := range m.To {
			a, _ := mail.ParseAddress(to)
			wantTo = append(wantTo, a.Address)
		}
		if !slices.Equal(r.To, wantTo) {
			t.Errorf("%s RCPT TO = %v, want %v", m.Key, r.To, wantTo)
		}
	}
}

// A sender that died between handing the message to the relay and marking it sent
// leaves a sending mark; SMTP cannot be asked, so the message goes once more, and
// never a third time.
func TestSMTPSendingMarkIsTheOneRepeat(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ms := startMailServer(t)
	transport := outbox.SMTPTransport{Addr: ms.addr}
	m := message("run-r", "debit", "run-r:debit:SUP-07")
	f.queue(t, m)
	if _, err := f.kv.Create(testContext(t), outbox.MarkKey(m.RunID, m.Key), []byte(outbox.Sending)); err != nil {
		t.Fatal(err)
	}
	if err := transport.Deliver(testContext(t), m, outbox.Render(m)); err != nil {
		t.Fatal(err)
	}

	handleAll(t, f.sender(t, outbox.SenderConfig{Transport: transport}), f.cons, 1)
	handleAll(t, f.sender(t, outbox.SenderConfig{Transport: transport}), f.consumer(t, "outbox-sender-2"), 1)

	if got := len(ms.mails()); got != 2 {
		t.Errorf("server received %d copies, want 2 (the original and the one repeat)", got)
	}
	if mark := f.markOf(t, m); mark != outbox.Sent {
		t.Errorf("mark = %q, want sent", mark)
	}
}

func TestSMTPTemporaryRefusalIsRetried(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ms := startMailServer(t)
	ms.setRefuse(&smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "try again later"})
	m := message("run-t", "report", "run-t:report")
	f.queue(t, m)
	s := f.sender(t, outbox.SenderConfig{Transport: outbox.SMTPTransport{Addr: ms.addr}})

	err := s.Handle(testContext(t), next(t, f.cons))
	if err == nil || errors.Is(err, outbox.ErrPermanent) {
		t.Fatalf("Handle = %v, want a temporary error", err)
	}
	if mark := f.markOf(t, m); mark != outbox.Sending {
		t.Errorf("mark after a refused attempt = %q, want sending", mark)
	}

	ms.setRefuse(nil)
	handleAll(t, s, f.cons, 1) // the NakWithDelay brings it back

	if got := len(ms.mails()); got != 1 {
		t.Errorf("server received %d messages, want 1", got)
	}
	if mark := f.markOf(t, m); mark != outbox.Sent {
		t.Errorf("mark = %q, want sent", mark)
	}
}

// A 5xx is refused for good: the mark says refused (the message did not go), the host
// hears of it, and the message is terminated rather than retried. Reopened and queued again
// after the fix (a resume), it goes once.
func TestSMTPPermanentRefusalIsRefusedThenSentOnceAfterReopen(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ms := startMailServer(t)
	ms.setRefuse(&smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such mailbox"})
	m := message("run-p", "debit", "run-p:debit:SUP-07")
	f.queue(t, m)
	var mu sync.Mutex
	var refused []string
	s := f.sender(t, outbox.SenderConfig{
		Transport: outbox.SMTPTransport{Addr: ms.addr},
		Refused: func(_ context.Context, m outbox.Message, err error) {
			mu.Lock()
			defer mu.Unlock()
			if errors.Is(err, outbox.ErrPermanent) {
				refused = append(refused, m.Key)
			}
		},
	})

	if err := s.Handle(testContext(t), next(t, f.cons)); !errors.Is(err, outbox.ErrPermanent) {
		t.Fatalf("Handle = %v, want ErrPermanent", err)
	}
	mu.Lock()
	if !slices.Equal(refused, []string{m.Key}) {
		t.Errorf("Refused calls = %v, want %q", refused, m.Key)
	}
	mu.Unlock()
	if mark := f.markOf(t, m); mark != outbox.Refused {
		t.Fatalf("mark = %q, want refused", mark)
	}
	waitSettled(t, f)

	// The relay is fixed; a resume reopens the mark and queues a copy of its own.
	ms.setRefuse(nil)
	if ok, err := outbox.Reopen(testContext(t), f.kv, m.RunID, m.Key); err != nil || !ok {
		t.Fatalf("Reopen = %v, %v; want true", ok, err)
	}
	again := m
	again.Requeue = 42
	f.queue(t, again)
	handleAll(t, s, f.cons, 1)
	if got := len(ms.mails()); got != 1 {
		t.Fatalf("server received %d copies, want 1", got)
	}
	if mark := f.markOf(t, m); mark != outbox.Sent {
		t.Fatalf("mark = %q, want sent", mark)
	}
	if ok, err := outbox.Reopen(testContext(t), f.kv, m.RunID, m.Key); err != nil || ok {
		t.Fatalf("Reopen of a sent mark = %v, %v; want false", ok, err)
	}
}

// A refused message was never handed over: the compensator's Cancel wins over it.
func TestCancelWinsOverARefusedMessage(t *testing.T) {
	t.Parallel()
	f := setup(t)
	m := message("run-p", "debit", "run-p:debit:SUP-09")
	if _, err := f.kv.Create(testContext(t), outbox.MarkKey(m.RunID, m.Key), []byte(outbox.Refused)); err != nil {
		t.Fatal(err)
	}
	if won, err := outbox.Cancel(testContext(t), f.kv, m.RunID, m.Key); err != nil || !won {
		t.Fatalf("Cancel = %v, %v; want true", won, err)
	}
	if mark := f.markOf(t, m); mark != outbox.Cancelled {
		t.Fatalf("mark = %q, want cancelled", mark)
	}
}

// waitSettled waits until the outbox-sender durable has nothing pending or unacknowledged.
func waitSettled(t *testing.T, f *fixture) {
	t.Helper()
	ctx := testContext(t)
	eventually.That(t, 30*time.Second, "every message settled", func() error {
		info, err := f.cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending != 0 || info.NumPending != 0 {
			return fmt.Errorf("message still pending: %+v", info)
		}
		return nil
	})
}
