package recon

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/pkg/ratelimit"
	"github.com/cairnhq/cairn/pkg/retry"
)

// fakeModel speaks the chat-completions API: it reads the invoice with the rules, unless
// the test's behave says otherwise for this call.
type fakeModel struct {
	calls  atomic.Int32
	behave func(n int, w http.ResponseWriter, r *http.Request) bool // true: handled
	seen   chan chatRequest
}

func (f *fakeModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := int(f.calls.Add(1))
	var req chatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer k-1" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	if f.seen != nil {
		f.seen <- req
	}
	if f.behave != nil && f.behave(n, w, r) {
		return
	}
	doc := req.Messages[len(req.Messages)-1].Content
	no := ""
	if m := invoiceNoLine.FindStringSubmatch(doc); m != nil {
		no = m[1]
	}
	answer, err := RuleExtractor{}.Extract(r.Context(), no, []byte(doc))
	if err != nil {
		answer, _ = json.Marshal(map[string]string{"unreadable": err.Error()})
	}
	reply(w, string(answer))
}

var invoiceNoLine = regexp.MustCompile(`(?m)^Invoice No: (\S+)`)

func reply(w http.ResponseWriter, content string) {
	b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": content}}}})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

const sampleInvoice = `TAX INVOICE
Invoice No: INV-20261013-0001
Supplier: Sharma Steel Works [SUP-07]
Bill To: Ludhiana Warehouse [ldh]
Date: 13/10/2026
PO Ref: PO-88120
1. BOLT-M8-50  Hex bolt M8x50   200 pcs @ 12.50 = 2,500.00
2. NUT-M8      Hex nut M8       200 pcs @ 3.25 = 650.00
Total: 3,150.00
`

func TestModelExtractor(t *testing.T) {
	ctx := context.Background()
	want, err := RuleExtractor{}.Extract(ctx, "INV-20261013-0001", []byte(sampleInvoice))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		behave func(n int, w http.ResponseWriter, r *http.Request) bool
		check  func(t *testing.T, answer []byte, err error)
	}{
		{"answer", nil, func(t *testing.T, answer []byte, err error) {
			if err != nil || string(answer) != string(want) {
				t.Fatalf("answer %s (%v), want the line items word for word %s", answer, err, want)
			}
		}},
		{"429", func(n int, w http.ResponseWriter, r *http.Request) bool {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return true
		}, temporary},
		{"5xx", func(n int, w http.ResponseWriter, r *http.Request) bool {
			w.WriteHeader(http.StatusBadGateway)
			return true
		}, temporary},
		{"slow", func(n int, w http.ResponseWriter, r *http.Request) bool {
			<-r.Context().Done() // slower than the client's timeout: it gives up first
			return true
		}, temporary},
		{"garbage", func(n int, w http.ResponseWriter, r *http.Request) bool {
			reply(w, "Sure! Here are the line items: BOLT-M8-50 ×200 …")
			return true
		}, unreadableErr},
		{"not a completion", func(n int, w http.ResponseWriter, r *http.Request) bool {
			_, _ = w.Write([]byte("<html>gateway</html>"))
			return true
		}, unreadableErr},
		{"refusal", func(n int, w http.ResponseWriter, r *http.Request) bool {
			b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"finish_reason": "stop", "message": map[string]any{"content": "", "refusal": "I can't help with that"}}}})
			_, _ = w.Write(b)
			return true
		}, unreadableErr},
		{"wrong schema", func(n int, w http.ResponseWriter, r *http.Request) bool {
			reply(w, `{"invoice_no":"INV-20261013-0001","lines":[]}`)
			return true
		}, unreadableErr},
		{"bad key", func(n int, w http.ResponseWriter, r *http.Request) bool {
			http.Error(w, `{"error":"invalid api key"}`, http.StatusUnauthorized)
			return true
		}, func(t *testing.T, answer []byte, err error) {
			var u *UnreadableError
			if err == nil || errors.Is(err, retry.ErrTemporary) || errors.As(err, &u) {
				t.Fatalf("a 401: %v, want an error that is neither temporary nor unreadable (it stops the run)", err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeModel{behave: c.behave, seen: make(chan chatRequest, 1)}
			srv := httptest.NewServer(f)
			defer srv.Close()
			// A short timeout only where the client must give up first: an answer in time on a
			// busy machine may take longer than 300 ms.
			timeout := 10 * time.Second
			if c.name == "slow" {
				timeout = 300 * time.Millisecond
			}
			m := NewModelExtractor(srv.URL+"/v1/", "test-model", "k-1", nil, timeout)
			answer, err := m.Extract(ctx, "INV-20261013-0001", []byte(sampleInvoice))
			c.check(t, answer, err)
			req := <-f.seen
			if req.Model != "test-model" || req.Messages[0].Role != "system" || req.Messages[1].Content != sampleInvoice || req.ResponseFormat["type"] != "json_object" {
				t.Errorf("request %+v", req)
			}
		})
	}
	m := NewModelExtractor("http://x", "m-9", "", nil, 0)
	if v := m.Versions(); v != (ExtractorVersions{Prompt: ModelPromptVersion, Schema: RuleSchemaVersion, Model: "m-9"}) {
		t.Errorf("versions %+v", v)
	}
}

func temporary(t *testing.T, answer []byte, err error) {
	t.Helper()
	if !errors.Is(err, retry.ErrTemporary) {
		t.Fatalf("got %v (answer %s), want a temporary error", err, answer)
	}
}

func unreadableErr(t *testing.T, answer []byte, err error) {
	t.Helper()
	var u *UnreadableError
	if !errors.As(err, &u) {
		t.Fatalf("got %v (answer %s), want an unreadable invoice", err, answer)
	}
}

// The wait for the shared limit is not part of the call: at 1 call a second, the second
// call waits most of a second for its slot, longer than the call's 300ms timeout, and still gets
// its answer; the limiter counts both grants.
func TestModelTimeoutStartsAtTheGrant(t *testing.T) {
	js := natstest.JetStream(t)
	ctx := t.Context()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "limits"}); err != nil {
		t.Fatal(err)
	}
	lim, err := ratelimit.New(ctx, ratelimit.Config{JS: js, Limit: ratelimit.Limit{Bucket: "limits", Key: "model", PerSecond: 1}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(&fakeModel{})
	defer srv.Close()
	m := NewModelExtractor(srv.URL+"/v1", "test-model", "k-1", lim, 300*time.Millisecond)
	for i := range 2 {
		if _, err := m.Extract(ctx, "INV-20261013-0001", []byte(sampleInvoice)); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	if s := lim.Stats(); s.Grants != 2 || s.Waited < 300*time.Millisecond {
		t.Errorf("limiter stats %+v, want 2 grants and the second's wait over the call's timeout", s)
	}
}
