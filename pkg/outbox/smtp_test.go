package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"net/mail"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

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

func TestSMTPPermanentRefusalIsDropped(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ms := startMailServer(t)
	ms.setRefuse(&smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such mailbox"})
	m := message("run-p", "debit", "run-p:debit:SUP-07")
	f.queue(t, m)
	var mu sync.Mutex
	var dropped []string
	s := f.sender(t, outbox.SenderConfig{
		Transport: outbox.SMTPTransport{Addr: ms.addr},
		Dropped: func(_ context.Context, m outbox.Message, _ string) {
			mu.Lock()
			defer mu.Unlock()
			dropped = append(dropped, m.Key)
		},
	})

	if err := s.Handle(testContext(t), next(t, f.cons)); !errors.Is(err, outbox.ErrPermanent) {
		t.Fatalf("Handle = %v, want ErrPermanent", err)
	}
	if !slices.Equal(dropped, []string{m.Key}) {
		t.Errorf("Dropped calls = %v, want %q", dropped, m.Key)
	}
	// Terminated, not redelivered: nothing is pending or waiting for an ack.
	ctx := testContext(t)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		info, err := f.cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending == 0 && info.NumPending == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("message still pending: %+v", info)
		case <-tick.C:
		}
	}
}
