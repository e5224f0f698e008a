package httpidem_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	"github.com/cairnhq/cairn/pkg/fence"
	"github.com/cairnhq/cairn/pkg/httpidem"
	"github.com/cairnhq/cairn/pkg/retry"
)

// RaiseFence sends the run and the token in the fence headers; a system that heard a newer
// token answers 409, which is fence.ErrFenced, and one that fails answers 5xx, temporary.
func TestRaiseFence(t *testing.T) {
	var (
		mu      sync.Mutex
		highest = map[string]uint64{}
		failing bool
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if failing {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		run := r.Header.Get(httpidem.DefaultRunHeader)
		tok, err := strconv.ParseUint(r.Header.Get(httpidem.DefaultTokenHeader), 10, 64)
		if err != nil || run == "" || r.Method != http.MethodPost {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if tok < highest[run] {
			w.WriteHeader(http.StatusConflict)
			return
		}
		highest[run] = tok
	}))
	defer srv.Close()
	c, err := httpidem.NewClient(httpidem.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := c.RaiseFence(ctx, srv.URL, fence.Token{RunID: "r-1", Value: 7}); err != nil {
		t.Fatalf("raising r-1 to 7: %v", err)
	}
	if err := c.RaiseFence(ctx, srv.URL, fence.Token{RunID: "r-1", Value: 5}); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("raising r-1 to 5 after 7: %v, want fence.ErrFenced", err)
	}
	if err := c.RaiseFence(ctx, srv.URL, fence.Token{RunID: "r-2", Value: 5}); err != nil {
		t.Fatalf("raising r-2 to 5: %v (tokens are compared within a run)", err)
	}
	mu.Lock()
	if highest["r-1"] != 7 || highest["r-2"] != 5 {
		t.Errorf("the system holds %v, want r-1 at 7 and r-2 at 5", highest)
	}
	failing = true
	mu.Unlock()
	if err := c.RaiseFence(ctx, srv.URL, fence.Token{RunID: "r-1", Value: 8}); !errors.Is(err, retry.ErrTemporary) {
		t.Fatalf("raising against a 503: %v, want a temporary error", err)
	}
}
