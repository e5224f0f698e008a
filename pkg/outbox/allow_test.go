package outbox_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnhq/cairn/pkg/outbox"
)

// counting is an in-process HTTP server that counts the calls it gets.
func counting(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if h != nil {
			h(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s, &n
}

// refusedOnce handles the one queued message, which must be refused as forbidden: marked
// refused, Refused told, the transport never handed it.
func refusedOnce(t *testing.T, f *fixture, c outbox.SenderConfig, m outbox.Message) {
	t.Helper()
	var mu sync.Mutex
	var refused []error
	c.Refused = func(_ context.Context, _ outbox.Message, err error) {
		mu.Lock()
		refused = append(refused, err)
		mu.Unlock()
	}
	s := f.sender(t, c)
	f.queue(t, m)
	if err := s.Handle(testContext(t), next(t, f.cons)); !errors.Is(err, outbox.ErrForbidden) {
		t.Fatalf("Handle of %q = %v, want %v", m.Key, err, outbox.ErrForbidden)
	}
	if mark := f.markOf(t, m); mark != outbox.Refused {
		t.Fatalf("mark of %q = %q, want refused", m.Key, mark)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(refused) != 1 || !errors.Is(refused[0], outbox.ErrForbidden) {
		t.Fatalf("Refused calls %v, want one naming %v", refused, outbox.ErrForbidden)
	}
}

// A message naming another URL than the configured webhook (an internal admin endpoint, a
// notice forged by any user that may queue) is never POSTed anywhere, and signed by nobody.
func TestWebhookGoesOnlyToTheConfiguredURL(t *testing.T) {
	t.Parallel()
	hook, hookCalls := counting(t, nil)
	admin, adminCalls := counting(t, nil)
	for name, c := range map[string]outbox.SenderConfig{
		"the sender refuses it": {
			Transport: outbox.Routed{Mail: outbox.FileTransport{Dir: t.TempDir()}, Webhook: outbox.WebhookTransport{URL: hook.URL, Secret: []byte("s")}},
			Allow:     outbox.Allow{From: anyMail.From, Mail: anyMail.Mail, Webhook: hook.URL},
		},
		// Even a sender allowing it: the transport calls its own URL or none.
		"the transport refuses it": {
			Transport: outbox.Routed{Mail: outbox.FileTransport{Dir: t.TempDir()}, Webhook: outbox.WebhookTransport{URL: hook.URL, Secret: []byte("s")}},
			Allow:     outbox.Allow{From: anyMail.From, Mail: anyMail.Mail, Webhook: admin.URL + "/internal-admin"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := setup(t)
			m := message("run-x", "handover", "run-x:handover:record:webhook")
			m.To = []string{admin.URL + "/internal-admin"}
			refusedOnce(t, f, c, m)
		})
	}
	if n := adminCalls.Load(); n != 0 {
		t.Fatalf("the internal admin endpoint got %d calls, want none", n)
	}
	if n := hookCalls.Load(); n != 0 {
		t.Fatalf("the configured webhook got %d calls for a message not addressed to it, want none", n)
	}
}

// Mail goes only from the configured sender and to the recipients the configuration's
// rule derives: a forged From, or a To of the message's own choosing, sends nothing.
func TestMailGoesOnlyFromTheSenderToAllowedRecipients(t *testing.T) {
	t.Parallel()
	allow := outbox.Allow{From: "cairn@cairn.local", Mail: func(kind, to string) bool {
		return kind == "debit" && to == "accounts+sup-07@suppliers.example"
	}}
	for name, forge := range map[string]func(m *outbox.Message){
		"another sender":           func(m *outbox.Message) { m.From = "ceo@cairn.local" },
		"the sender, renamed":      func(m *outbox.Message) { m.From = "Payroll <cairn@cairn.local>" },
		"a recipient of its own":   func(m *outbox.Message) { m.To = []string{"attacker@evil.example"} },
		"one recipient more":       func(m *outbox.Message) { m.To = append(m.To, "attacker@evil.example") },
		"a kind that goes nowhere": func(m *outbox.Message) { m.Kind = "invoice" },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			dir := t.TempDir()
			ms := startMailServer(t)
			m := message("run-x", "debit", "run-x:debit:SUP-07")
			m.From, m.To = "cairn@cairn.local", []string{"accounts+sup-07@suppliers.example"}
			forge(&m)
			transport := outbox.Routed{Mail: outbox.SMTPTransport{Addr: ms.addr}}
			if name == "another sender" {
				transport = outbox.Routed{Mail: outbox.FileTransport{Dir: dir}}
			}
			refusedOnce(t, f, outbox.SenderConfig{Transport: transport, Allow: allow}, m)
			if got := ms.mails(); len(got) != 0 {
				t.Fatalf("the relay received %v, want nothing", got)
			}
			if files, _ := os.ReadDir(dir); len(files) != 0 {
				t.Fatalf("mail folder holds %d files, want none", len(files))
			}
		})
	}
	// The message as the steps make it goes.
	f := setup(t)
	ms := startMailServer(t)
	m := message("run-x", "debit", "run-x:debit:SUP-07")
	m.From, m.To = "cairn@cairn.local", []string{"accounts+sup-07@suppliers.example"}
	f.queue(t, m)
	handleAll(t, f.sender(t, outbox.SenderConfig{Transport: outbox.SMTPTransport{Addr: ms.addr}, Allow: allow}), f.cons, 1)
	if got := ms.mails(); len(got) != 1 || got[0].From != "cairn@cairn.local" {
		t.Fatalf("the relay received %+v, want the one debit note", got)
	}
}

// A webhook that redirects is not followed, with its signature, to where it points: the
// redirect is a refusal, and the second server hears nothing.
func TestWebhookDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	elsewhere, elsewhereCalls := counting(t, nil)
	hook, hookCalls := counting(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+"/internal-admin", http.StatusTemporaryRedirect)
	})
	f := setup(t)
	m := message("run-x", "handover", "run-x:handover:record:webhook")
	m.To = []string{hook.URL}
	var refused error
	s := f.sender(t, outbox.SenderConfig{
		Transport: outbox.Routed{Webhook: outbox.WebhookTransport{URL: hook.URL, Secret: []byte("s"), Client: &http.Client{Timeout: time.Minute}}},
		Allow:     outbox.Allow{Webhook: hook.URL},
		Refused:   func(_ context.Context, _ outbox.Message, err error) { refused = err },
	})
	f.queue(t, m)
	if err := s.Handle(testContext(t), next(t, f.cons)); !errors.Is(err, outbox.ErrPermanent) {
		t.Fatalf("Handle = %v, want a refusal (%v)", err, outbox.ErrPermanent)
	}
	if mark := f.markOf(t, m); mark != outbox.Refused || refused == nil {
		t.Fatalf("mark %q, Refused told %v; want refused", mark, refused)
	}
	if hookCalls.Load() != 1 || elsewhereCalls.Load() != 0 {
		t.Fatalf("webhook calls %d, redirect target calls %d; want 1 and 0", hookCalls.Load(), elsewhereCalls.Load())
	}
}

// The signature covers the timestamp and the key with the body: the receiver's check takes
// the call as sent, and refuses it with another key, another timestamp, another body, or
// one too old.
func TestWebhookSignatureCoversTimestampAndKey(t *testing.T) {
	t.Parallel()
	secret := []byte("s3cret")
	at := time.Date(2026, 10, 13, 22, 30, 0, 0, time.UTC)
	type call struct {
		h    http.Header
		body []byte
	}
	calls := make(chan call, 1)
	hook, _ := counting(t, func(_ http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		calls <- call{r.Header.Clone(), b}
	})
	m := message("run-x", "handover", "run-x:handover:record:webhook")
	m.To, m.Body = []string{hook.URL}, `{"kind":"handover"}`
	tr := outbox.WebhookTransport{URL: hook.URL, Secret: secret, Now: func() time.Time { return at }}
	if err := tr.Deliver(testContext(t), m, nil); err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	c := <-calls
	ts := strconv.FormatInt(at.Unix(), 10)
	if got := c.h.Get(outbox.TimestampHeader); got != ts {
		t.Fatalf("%s = %q, want the call's Unix time %s", outbox.TimestampHeader, got, ts)
	}
	if err := outbox.VerifyWebhook(secret, c.h, c.body, at.Add(time.Minute), 5*time.Minute); err != nil {
		t.Fatalf("VerifyWebhook of the call as sent: %v", err)
	}
	for name, change := range map[string]func(h http.Header, body *[]byte) time.Time{
		"another key": func(h http.Header, _ *[]byte) time.Time { h.Set(outbox.KeyHeader, "run-y:report"); return at },
		"another timestamp": func(h http.Header, _ *[]byte) time.Time {
			h.Set(outbox.TimestampHeader, strconv.FormatInt(at.Unix()+1, 10))
			return at
		},
		"another body": func(_ http.Header, b *[]byte) time.Time { *b = []byte(`{"kind":"approval"}`); return at },
		"another secret": func(h http.Header, _ *[]byte) time.Time {
			h.Set(outbox.SignatureHeader, outbox.Sign([]byte("guess"), ts, m.Key, c.body))
			return at
		},
		"replayed too late": func(http.Header, *[]byte) time.Time { return at.Add(6 * time.Minute) },
		"no timestamp":      func(h http.Header, _ *[]byte) time.Time { h.Del(outbox.TimestampHeader); return at },
	} {
		h, body := c.h.Clone(), append([]byte(nil), c.body...)
		now := change(h, &body)
		if err := outbox.VerifyWebhook(secret, h, body, now, 5*time.Minute); !errors.Is(err, outbox.ErrSignature) {
			t.Errorf("%s: VerifyWebhook = %v, want %v", name, err, outbox.ErrSignature)
		}
	}
}
