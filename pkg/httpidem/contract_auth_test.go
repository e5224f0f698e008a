package httpidem_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/cairnhq/cairn/pkg/httpidem"
)

// A Content-Digest that is not the body's is refused with 400 before anything is claimed:
// the same key with the right digest then runs the handler.
func testDigestMismatch(t *testing.T, store *httpidem.SQLStore) {
	var b *bundle
	b = setup(t, store, created(&b), httpidem.WithKeyRequired())
	a, err := send(t, b.url, `"k-digest"`, `{"amount":100}`, httpidem.DigestHeader, httpidem.ContentDigest([]byte(`{"amount":999}`)))
	if err != nil {
		t.Fatal(err)
	}
	if a.status != http.StatusBadRequest || a.problem(t).Type != httpidem.TypeDigestMismatch || b.calls.Load() != 0 {
		t.Fatalf("a body under another body's digest: %d %s (handler ran %d times), want 400 %s and no run", a.status, a.body, b.calls.Load(), httpidem.TypeDigestMismatch)
	}
	a, err = send(t, b.url, `"k-digest"`, `{"amount":100}`, httpidem.DigestHeader, httpidem.ContentDigest([]byte(`{"amount":100}`)))
	if err != nil {
		t.Fatal(err)
	}
	if a.status != http.StatusCreated || b.calls.Load() != 1 {
		t.Fatalf("the same key with its body's digest: %d %s, want 201 (the refusal claimed nothing)", a.status, a.body)
	}
}

// The same key and body under another run's headers is another request: 422, never the
// first run's answer.
func testOtherRun(t *testing.T, store *httpidem.SQLStore) {
	var b *bundle
	b = setup(t, store, created(&b))
	first, err := send(t, b.url, `"k-run"`, `{"amount":100}`, "Cairn-Run", "run-a", "Cairn-Fence-Token", "3")
	if err != nil || first.status != http.StatusCreated {
		t.Fatalf("first: %v %d %s", err, first.status, first.body)
	}
	a, err := send(t, b.url, `"k-run"`, `{"amount":100}`, "Cairn-Run", "run-b", "Cairn-Fence-Token", "3")
	if err != nil {
		t.Fatal(err)
	}
	if a.status != http.StatusUnprocessableEntity || a.problem(t).Type != httpidem.TypeKeyReused || b.calls.Load() != 1 {
		t.Fatalf("run-b's repeat of run-a's request: %d %s, want 422 %s", a.status, a.body, httpidem.TypeKeyReused)
	}
	again, err := send(t, b.url, `"k-run"`, `{"amount":100}`, "Cairn-Run", "run-a", "Cairn-Fence-Token", "3")
	if err != nil || again.status != http.StatusCreated || string(again.body) != string(first.body) {
		t.Fatalf("run-a's repeat: %v %d %s, want its first answer", err, again.status, again.body)
	}
}

// A key whose first request never stores its answer (its server died after the effect)
// is answered from the effect by WithRecovery, and stays answered.
func testRecovered(t *testing.T, store *httpidem.SQLStore) {
	hold := make(chan struct{})
	entered := make(chan struct{}, 1)
	var b *bundle
	effect := make(chan bool, 1)
	effect <- false
	recover := func(*http.Request) (httpidem.Answer, bool, error) {
		done := <-effect
		effect <- done
		if !done {
			return httpidem.Answer{}, false, nil
		}
		return httpidem.Answer{Status: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"from":"effect"}`)}, true, nil
	}
	b = setup(t, store, func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-hold // the "dead" server: its answer is never stored
		created(&b)(w, r)
	}, httpidem.WithRecovery(recover))
	t.Cleanup(func() { close(hold) }) // before the server's Close, which waits for the handler
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, b.url+"/v1/entries", nil)
		req.Header.Set("Idempotency-Key", `"k-dead"`)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the first request never reached the handler")
	}
	a, err := send(t, b.url, `"k-dead"`, "")
	if err != nil {
		t.Fatal(err)
	}
	if a.status != http.StatusConflict {
		t.Fatalf("a retry before the effect: %d %s, want 409 in flight", a.status, a.body)
	}
	<-effect
	effect <- true
	for range 2 {
		a, err = send(t, b.url, `"k-dead"`, "")
		if err != nil {
			t.Fatal(err)
		}
		if a.status != http.StatusCreated || string(a.body) != `{"from":"effect"}` || a.header.Get(httpidem.ReplayedHeader) != "true" {
			t.Fatalf("a retry after the effect: %d %s, want the effect's answer replayed", a.status, a.body)
		}
	}
	if b.calls.Load() != 1 {
		t.Fatalf("the handler ran %d times, want once", b.calls.Load())
	}
}
