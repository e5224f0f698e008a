package httpidem_test

import (
	"cmp"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	_ "modernc.org/sqlite"

	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/pkg/fence"
	"github.com/cairnhq/cairn/pkg/httpidem"
	"github.com/cairnhq/cairn/pkg/idempotency"
	"github.com/cairnhq/cairn/pkg/ratelimit"
	"github.com/cairnhq/cairn/pkg/retry"
)

// api is an HTTP service built on the middleware, over a SQLite file: POST /entries
// inserts a row (a body "bad..." is refused with a 400 problem), GET /entries/{key}
// reads it back.
type api struct {
	db   *sql.DB
	runs atomic.Int64 // POST handler runs
	// block, when set, holds the POST handler until it is closed, after a send on
	// entered.
	block, entered chan struct{}
}

func newAPI(t *testing.T) (*api, http.Handler) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "api.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	store := httpidem.NewSQLiteStore(db)
	if err := store.CreateTables(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE entries(id INTEGER PRIMARY KEY, key TEXT NOT NULL, body TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	a := &api{db: db}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /entries", func(w http.ResponseWriter, r *http.Request) {
		a.runs.Add(1)
		if a.block != nil {
			a.entered <- struct{}{}
			<-a.block
		}
		key, _ := httpidem.ParseKey(r.Header.Get(httpidem.KeyHeader))
		body, _ := io.ReadAll(r.Body)
		if strings.HasPrefix(string(body), "bad") {
			httpidem.Problem{Type: "https://example.com/probs/amount", Title: "Amount invalid", Status: http.StatusBadRequest,
				Detail: "the amount is not a number", Extensions: map[string]any{"field": "amount"}}.Write(w)
			return
		}
		res, err := db.Exec(`INSERT INTO entries(key, body) VALUES (?, ?)`, key, string(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		id, _ := res.LastInsertId()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", fmt.Sprintf("/entries/%d", id))
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]any{"id": id, "key": key})
	})
	mux.HandleFunc("GET /entries/{key}", func(w http.ResponseWriter, r *http.Request) {
		var id int64
		err := db.QueryRow(`SELECT id FROM entries WHERE key = ?`, r.PathValue("key")).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"id": id})
	})
	return a, httpidem.New(store).Wrap(mux)
}

func (a *api) rows(t *testing.T, key string) int {
	t.Helper()
	var n int
	if err := a.db.QueryRow(`SELECT count(*) FROM entries WHERE key = ?`, key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func newClient(t *testing.T, c httpidem.ClientConfig) *httpidem.Client {
	t.Helper()
	c.CallTimeout = cmp.Or(c.CallTimeout, 10*time.Second)
	cl, err := httpidem.NewClient(c)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func classOf(t *testing.T, err error) *httpidem.Error {
	t.Helper()
	var e *httpidem.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v is not an *httpidem.Error", err)
	}
	return e
}

// dropFirst runs next for the first n POSTs, then hijacks the connection and closes it
// before any answer is written: the write landed and its reply was lost.
func dropFirst(next http.Handler, n int64, also *atomic.Int64) http.Handler {
	var seen atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || seen.Add(1) > n {
			next.ServeHTTP(w, r)
			return
		}
		if also == nil || also.Add(1) == 1 {
			next.ServeHTTP(httptest.NewRecorder(), r) // the write lands
		}
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	})
}

// holdFirst runs next for the first POST and then holds its answer until the client
// hangs up: the write landed and the client's call timed out.
func holdFirst(next http.Handler) http.Handler {
	var seen atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || seen.Add(1) > 1 {
			next.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(httptest.NewRecorder(), r)
		<-r.Context().Done()
	})
}

// (a) A reply lost after the write landed is settled by a lookup: the answer stored,
// the handler run once, one row.
func TestClientLostReplyIsLookedUp(t *testing.T) {
	for _, tc := range []struct {
		name    string
		get     bool
		timeout bool
	}{{"reset, same request again", false, false}, {"reset, GET of the key", true, false}, {"timeout, same request again", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			a, h := newAPI(t)
			cfg := httpidem.ClientConfig{}
			if tc.timeout {
				h = holdFirst(h)
				cfg.CallTimeout = 300 * time.Millisecond
			} else {
				h = dropFirst(h, 1, nil)
			}
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			if tc.get {
				cfg.LookupURL = func(key string) string { return srv.URL + "/entries/" + url.PathEscape(key) }
			}
			rc, err := newClient(t, cfg).Write(t.Context(), httpidem.Request{URL: srv.URL + "/entries", Key: "run-1:post:1", Run: "run-1", Token: 3, Body: []byte(`{"amount":5}`)})
			if err != nil {
				t.Fatalf("write: %v", err)
			}
			if !rc.Replayed || rc.Reference == "" || rc.AnswerDigest == "" || rc.Fingerprint != idempotency.Digest([]byte(`{"amount":5}`)) {
				t.Errorf("receipt %+v: want replayed, with a reference, the answer's digest and the payload's fingerprint", rc)
			}
			if tc.get && rc.Status != http.StatusOK || !tc.get && rc.Status != http.StatusCreated {
				t.Errorf("status %d", rc.Status)
			}
			if n := a.runs.Load(); n != 1 {
				t.Errorf("handler ran %d times, want 1", n)
			}
			if n := a.rows(t, "run-1:post:1"); n != 1 {
				t.Errorf("%d rows, want 1", n)
			}
		})
	}
}

// A lost reply whose lookup is lost too is temporary; the next write with the same key
// gets the stored answer, and nothing is written twice.
func TestClientLostLookupIsTemporary(t *testing.T) {
	a, h := newAPI(t)
	var landed atomic.Int64
	srv := httptest.NewServer(dropFirst(h, 2, &landed))
	t.Cleanup(srv.Close)
	cl := newClient(t, httpidem.ClientConfig{})
	req := httpidem.Request{URL: srv.URL + "/entries", Key: "k-lost", Body: []byte("x")}
	_, err := cl.Write(t.Context(), req)
	if !errors.Is(err, httpidem.ErrTemporary) || !errors.Is(err, retry.ErrTemporary) {
		t.Fatalf("write: %v, want ErrTemporary", err)
	}
	rc, err := cl.Write(t.Context(), req)
	if err != nil || !rc.Replayed || rc.Status != http.StatusCreated {
		t.Fatalf("retry: %+v, %v; want the stored 201 replayed", rc, err)
	}
	if n := a.runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
	if n := a.rows(t, "k-lost"); n != 1 {
		t.Errorf("%d rows, want 1", n)
	}
}

// (b) The same key with another payload is ErrKeyConflict naming the key and both
// fingerprints, and the runner's idempotency.ErrConflict (a handover).
func TestClientChangedPayloadIsKeyConflict(t *testing.T) {
	a, h := newAPI(t)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	cl := newClient(t, httpidem.ClientConfig{})
	if _, err := cl.Write(t.Context(), httpidem.Request{URL: srv.URL + "/entries", Key: "k-22", Body: []byte("amount=5")}); err != nil {
		t.Fatal(err)
	}
	_, err := cl.Write(t.Context(), httpidem.Request{URL: srv.URL + "/entries", Key: "k-22", Body: []byte("amount=6")})
	if !errors.Is(err, httpidem.ErrKeyConflict) || !errors.Is(err, idempotency.ErrConflict) {
		t.Fatalf("write: %v, want ErrKeyConflict", err)
	}
	var c *idempotency.ConflictError
	if !errors.As(err, &c) || c.Key != "k-22" || c.Stored == "" || c.New != idempotency.Digest([]byte("amount=6")) {
		t.Errorf("conflict %+v: want key k-22, the stored fingerprint and the new payload's", c)
	}
	if e := classOf(t, err); e.Status != http.StatusUnprocessableEntity || e.Problem.Type != httpidem.TypeKeyReused {
		t.Errorf("status %d, problem %+v", e.Status, e.Problem)
	}
	if !strings.Contains(err.Error(), "k-22") {
		t.Errorf("error %q does not name the key", err)
	}
	if n := a.runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}

// (c) A zombie's late request with an older token is ErrFenced (fence.ErrFenced to the
// runner), refused before the handler runs.
func TestClientOlderTokenIsFenced(t *testing.T) {
	a, h := newAPI(t)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	cl := newClient(t, httpidem.ClientConfig{})
	if _, err := cl.Write(t.Context(), httpidem.Request{URL: srv.URL + "/entries", Key: "k-new", Run: "run-9", Token: 2, Body: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	_, err := cl.Write(t.Context(), httpidem.Request{URL: srv.URL + "/entries", Key: "k-old", Run: "run-9", Token: 1, Body: []byte("b")})
	if !errors.Is(err, httpidem.ErrFenced) || !errors.Is(err, fence.ErrFenced) || errors.Is(err, retry.ErrTemporary) {
		t.Fatalf("write: %v, want ErrFenced and not temporary", err)
	}
	e := classOf(t, err)
	if e.Problem.Extensions["highest"] != float64(2) || e.Problem.Extensions["token"] != float64(1) {
		t.Errorf("problem %+v: want token 1 and highest 2", e.Problem)
	}
	if n := a.runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1 (not for the fenced request)", n)
	}
	if n := a.rows(t, "k-old"); n != 0 {
		t.Errorf("%d rows of the fenced write", n)
	}
}

// limiter is a real shared limit on an embedded NATS server.
func limiter(t *testing.T, perSecond float64) *ratelimit.Limiter {
	t.Helper()
	js := natstest.JetStream(t)
	if _, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "cairn-limits"}); err != nil {
		t.Fatal(err)
	}
	lim, err := ratelimit.New(t.Context(), ratelimit.Config{JS: js, Limit: ratelimit.Limit{Bucket: "cairn-limits", Key: "api", PerSecond: perSecond}})
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// tooMany answers the first n POSTs with status and Retry-After: after, before the
// middleware.
func tooMany(next http.Handler, n int64, status int, after string) http.Handler {
	var seen atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && seen.Add(1) <= n {
			w.Header().Set("Retry-After", after)
			httpidem.Problem{Title: "Slow down", Status: status}.Write(w)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// (d) A 429 with Retry-After: 1 is waited out as told (through the client's timer),
// then sent again through the shared limit, and done.
func TestClientRetryAfterIsWaited(t *testing.T) {
	for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			a, h := newAPI(t)
			srv := httptest.NewServer(tooMany(h, 1, status, "1"))
			t.Cleanup(srv.Close)
			lim := limiter(t, 50)
			var mu sync.Mutex
			var waits []time.Duration
			cl := newClient(t, httpidem.ClientConfig{Limiter: lim, After: func(d time.Duration) <-chan time.Time {
				mu.Lock()
				waits = append(waits, d)
				mu.Unlock()
				c := make(chan time.Time, 1)
				c <- time.Time{}
				return c
			}})
			rc, err := cl.Write(t.Context(), httpidem.Request{URL: srv.URL + "/entries", Key: "k-slow", Body: []byte("a")})
			if err != nil || rc.Status != http.StatusCreated {
				t.Fatalf("write: %+v, %v", rc, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(waits) != 1 || waits[0] != time.Second {
				t.Errorf("waited %v, want [1s]", waits)
			}
			if g := lim.Stats().Grants; g != 2 {
				t.Errorf("the limit granted %d calls, want 2 (the refused one and its retry)", g)
			}
			if n := a.runs.Load(); n != 1 {
				t.Errorf("handler ran %d times, want 1", n)
			}
		})
	}
}

// A Retry-After beyond MaxRetryAfter is not waited by the write: ErrRateLimited with the
// wait, temporary to the runner.
func TestClientLongRetryAfterIsReturned(t *testing.T) {
	_, h := newAPI(t)
	srv := httptest.NewServer(tooMany(h, 1, http.StatusTooManyRequests, "120"))
	t.Cleanup(srv.Close)
	cl := newClient(t, httpidem.ClientConfig{MaxRetryAfter: time.Minute, After: func(d time.Duration) <-chan time.Time {
		t.Errorf("waited %s", d)
		return time.After(0)
	}})
	_, err := cl.Write(t.Context(), httpidem.Request{URL: srv.URL + "/entries", Key: "k-slow", Body: []byte("a")})
	if !errors.Is(err, httpidem.ErrRateLimited) || !errors.Is(err, retry.ErrTemporary) {
		t.Fatalf("write: %v, want ErrRateLimited", err)
	}
	if e := classOf(t, err); e.Wait != 2*time.Minute {
		t.Errorf("wait %s, want 2m", e.Wait)
	}
}

// (e) A server down is ErrTemporary; once it is back on the same address the write is
// done, the handler run once.
func TestClientServerDownThenBack(t *testing.T) {
	a, h := newAPI(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cl := newClient(t, httpidem.ClientConfig{})
	req := httpidem.Request{URL: "http://" + addr + "/entries", Key: "k-down", Run: "run-2", Token: 1, Body: []byte("a")}
	for range 3 {
		_, err := cl.Write(t.Context(), req)
		if !errors.Is(err, httpidem.ErrTemporary) || !errors.Is(err, retry.ErrTemporary) {
			t.Fatalf("write while down: %v, want ErrTemporary", err)
		}
	}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening again on %s: %v", addr, err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	rc, err := cl.Write(t.Context(), req)
	if err != nil || rc.Status != http.StatusCreated || rc.Replayed {
		t.Fatalf("write once back: %+v, %v", rc, err)
	}
	if n := a.runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}

// (f) Another 4xx is ErrRejected carrying the server's problem details, and not
// temporary: the item is parked with them.
func TestClientOther4xxIsRejected(t *testing.T) {
	_, h := newAPI(t)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	_, err := newClient(t, httpidem.ClientConfig{}).Write(t.Context(), httpidem.Request{URL: srv.URL + "/entries", Key: "k-bad", Body: []byte("bad amount")})
	if !errors.Is(err, httpidem.ErrRejected) || errors.Is(err, retry.ErrTemporary) {
		t.Fatalf("write: %v, want ErrRejected, not temporary", err)
	}
	e := classOf(t, err)
	p := e.Problem
	if e.Status != http.StatusBadRequest || p.Type != "https://example.com/probs/amount" || p.Title != "Amount invalid" ||
		p.Status != http.StatusBadRequest || p.Detail != "the amount is not a number" || p.Extensions["field"] != "amount" {
		t.Errorf("status %d, problem %+v", e.Status, p)
	}
}

// A key in flight is ErrInFlight, temporary; other 5xx are ErrTemporary.
func TestClientInFlightAndServerErrors(t *testing.T) {
	a, h := newAPI(t)
	a.block, a.entered = make(chan struct{}), make(chan struct{}, 1)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	cl := newClient(t, httpidem.ClientConfig{})
	req := httpidem.Request{URL: srv.URL + "/entries", Key: "k-busy", Body: []byte("a")}
	first := make(chan error, 1)
	go func() { _, err := cl.Write(t.Context(), req); first <- err }()
	select {
	case <-a.entered:
	case err := <-first:
		t.Fatalf("first write returned early: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the first write never reached the handler")
	}
	_, err := cl.Write(t.Context(), req)
	if !errors.Is(err, httpidem.ErrInFlight) || !errors.Is(err, retry.ErrTemporary) {
		t.Errorf("second write: %v, want ErrInFlight", err)
	}
	close(a.block)
	if err := <-first; err != nil {
		t.Fatalf("first write: %v", err)
	}

	boom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(httpidem.DigestHeader) == "" || r.Header.Get(httpidem.KeyHeader) != `"k-500"` {
			t.Errorf("headers %v", r.Header)
		}
		http.Error(w, "boom", http.StatusBadGateway)
	}))
	t.Cleanup(boom.Close)
	_, err = cl.Write(t.Context(), httpidem.Request{URL: boom.URL, Key: "k-500", Body: []byte("a")})
	if !errors.Is(err, httpidem.ErrTemporary) || classOf(t, err).Status != http.StatusBadGateway {
		t.Errorf("write: %v, want ErrTemporary (502)", err)
	}
}
