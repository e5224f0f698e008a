package httpidem_test

import (
	"cmp"
	"context"
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

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	_ "modernc.org/sqlite"

	"github.com/cairnhq/cairn/internal/eventually"
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

// (d) A 429 with Retry-After: 1, to a client without a shared limit, is waited out as
// told on the client's timer, then sent again, and done.
func TestClientRetryAfterIsWaited(t *testing.T) {
	for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			a, h := newAPI(t)
			srv := httptest.NewServer(tooMany(h, 1, status, "1"))
			t.Cleanup(srv.Close)
			var mu sync.Mutex
			var waits []time.Duration
			cl := newClient(t, httpidem.ClientConfig{After: func(d time.Duration) <-chan time.Time {
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

// limiters are n instances' limiters on one limit, each on its own connection to one
// embedded NATS server.
func limiters(t *testing.T, kv jetstream.KeyValueConfig, l ratelimit.Limit, c ratelimit.Config, n int) []*ratelimit.Limiter {
	t.Helper()
	js := natstest.JetStream(t)
	if _, err := js.CreateKeyValue(t.Context(), kv); err != nil {
		t.Fatal(err)
	}
	var lims []*ratelimit.Limiter
	for range n {
		nc, err := nats.Connect(js.Conn().ConnectedUrl())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		ijs, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		c.JS, c.Limit = ijs, l
		lim, err := ratelimit.New(t.Context(), c)
		if err != nil {
			t.Fatal(err)
		}
		lims = append(lims, lim)
	}
	return lims
}

// arrivals records when each POST reached the server (by the test's clock), and answers
// the n-th with status and Retry-After: after, before the middleware.
type arrivals struct {
	mu      sync.Mutex
	at      []time.Time // every POST, the refused one included, in the order they came
	refused time.Time   // when the refused one came
}

func refuseNth(next http.Handler, n int, status int, after string) (*arrivals, http.Handler) {
	a := &arrivals{}
	return a, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		now := time.Now()
		a.mu.Lock()
		a.at = append(a.at, now)
		refuse := len(a.at) == n
		if refuse {
			a.refused = now
		}
		a.mu.Unlock()
		if refuse {
			w.Header().Set("Retry-After", after)
			httpidem.Problem{Title: "Slow down", Status: status}.Write(w)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// clockSlack: the limiter's slots are on the NATS server's wall clock, the arrivals on the
// test's monotonic one; on one machine they drift apart by far less than this over a test.
const clockSlack = 5 * time.Millisecond

// ownTimer fails the test when a write waits a Retry-After on its own timer.
func ownTimer(t *testing.T) func(time.Duration) <-chan time.Time {
	return func(d time.Duration) <-chan time.Time {
		t.Errorf("waited %s on the client's own timer, not in the shared limit", d)
		return time.After(0)
	}
}

// A 429 (or 503) with Retry-After: 1 to one instance holds every instance sharing its
// limit: the other's next write, begun once the hold is written, reaches the server no
// sooner than a second after the refusal, as does the refused write's retry; neither
// waits on its own timer.
func TestClientRetryAfterIsHeldForEveryInstance(t *testing.T) {
	for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			a, h := newAPI(t)
			arr, h := refuseNth(h, 1, status, "1")
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			lims := limiters(t, jetstream.KeyValueConfig{Bucket: "cairn-limits"},
				ratelimit.Limit{Bucket: "cairn-limits", Key: "api", PerSecond: 50}, ratelimit.Config{}, 2)
			clA := newClient(t, httpidem.ClientConfig{Limiter: lims[0], After: ownTimer(t)})
			clB := newClient(t, httpidem.ClientConfig{Limiter: lims[1], After: ownTimer(t)})
			done := make(chan error, 1)
			go func() {
				_, err := clA.Write(context.Background(), httpidem.Request{URL: srv.URL + "/entries", Key: "k-a", Body: []byte("a")})
				done <- err
			}()
			eventually.That(t, 30*time.Second, "the refused write holds the limit", func() error {
				if lims[0].Stats().Holds == 0 {
					select {
					case err := <-done:
						t.Fatalf("the refused write returned before it held the limit: %v", err)
					default:
					}
					return errors.New("no hold")
				}
				return nil
			})
			if _, err := clB.Write(t.Context(), httpidem.Request{URL: srv.URL + "/entries", Key: "k-b", Body: []byte("b")}); err != nil {
				t.Fatalf("the other instance's write: %v", err)
			}
			if err := <-done; err != nil {
				t.Fatalf("the refused write: %v", err)
			}
			arr.mu.Lock()
			defer arr.mu.Unlock()
			if len(arr.at) != 3 {
				t.Fatalf("%d POSTs reached the server, want 3 (the refused one, its retry, the other's)", len(arr.at))
			}
			for i, at := range arr.at[1:] {
				if d := at.Sub(arr.refused); d < time.Second-clockSlack {
					t.Errorf("POST %d reached the server %s after the refusal, before its Retry-After of 1s", i+2, d)
				}
			}
			if s := lims[1].Stats(); s.Holds != 0 || s.Grants != 1 {
				t.Errorf("the other instance's limiter %+v, want no hold and 1 grant", s)
			}
			if s := lims[0].Stats(); s.Holds != 1 || s.Grants != 2 {
				t.Errorf("the refused instance's limiter %+v, want 1 hold and 2 grants", s)
			}
			if n := a.runs.Load(); n != 2 {
				t.Errorf("handler ran %d times, want 2", n)
			}
		})
	}
}

// Two instances write at the declared rate, and one write is refused with Retry-After: 1
// on the way: the calls never come faster than the rate, counted from the first, and
// after the refusal at most one (the other instance's, booked before the hold) comes
// before the hold's end; from there on they come at the rate again.
func TestClientRetryAfterWithinTheDeclaredRate(t *testing.T) {
	a, h := newAPI(t)
	arr, h := refuseNth(h, 3, http.StatusTooManyRequests, "1")
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	l := ratelimit.Limit{Bucket: "cairn-limits", Key: "api", PerSecond: 20}
	lims := limiters(t, jetstream.KeyValueConfig{Bucket: "cairn-limits"}, l, ratelimit.Config{}, 2)
	const each = 5
	began := time.Now()
	errs := make(chan error, len(lims))
	for i, lim := range lims {
		cl := newClient(t, httpidem.ClientConfig{Limiter: lim, After: ownTimer(t)})
		go func() {
			for j := range each {
				if _, err := cl.Write(context.Background(), httpidem.Request{URL: srv.URL + "/entries",
					Key: fmt.Sprintf("k-%d-%d", i, j), Body: []byte("a")}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range lims {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	arr.mu.Lock()
	defer arr.mu.Unlock()
	if n := len(arr.at); n != 2*each+1 {
		t.Fatalf("%d POSTs reached the server, want %d (each write, and the refused one)", n, 2*each+1)
	}
	// The slots are one interval apart from the first booking on (burst 1), and no call
	// goes before its slot: the k-th call comes k-1 intervals after the writes began or
	// later.
	for k, at := range arr.at {
		if min := time.Duration(k) * l.Interval(); at.Sub(began) < min-clockSlack {
			t.Errorf("POST %d reached the server %s after the writes began, the rate allows it after %s", k+1, at.Sub(began), min)
		}
	}
	// Every call booked after the hold has a slot at its end or later, an interval apart;
	// of the calls booked before it, only the other instance's one in flight can come
	// after the refusal.
	var after []time.Time
	for _, at := range arr.at {
		if at.After(arr.refused) {
			after = append(after, at)
		}
	}
	for j := 1; j < len(after); j++ {
		if min := time.Second + time.Duration(j-1)*l.Interval(); after[j].Sub(arr.refused) < min-clockSlack {
			t.Errorf("call %d after the refusal came %s after it, the hold and the rate allow it after %s", j+1, after[j].Sub(arr.refused), min)
		}
	}
	if holds := lims[0].Stats().Holds + lims[1].Stats().Holds; holds != 1 {
		t.Errorf("%d holds, want 1", holds)
	}
	if n := a.runs.Load(); n != 2*each {
		t.Errorf("handler ran %d times, want %d", n, 2*each)
	}
}

// A Retry-After the limit does not hold is waited by the write alone, on its own timer:
// one beyond ratelimit.MaxHold (refused with ErrHold), and one whose hold fails (here the
// bucket takes no message larger than a booking's, and a hold's is larger).
func TestClientRetryAfterHoldRefusedIsWaitedAlone(t *testing.T) {
	// The longest booking here (its time to the nanosecond) and the compare-and-set's
	// header, which the bucket's size counts: a hold's entry of 1s ("hold_ns":1000000000)
	// is 11 bytes or more over them, whatever its booked_until.
	const booking = `{"booked_until":"2026-12-02T14:35:11.648175883Z","interval_ns":20000000,"burst":1}` +
		"NATS/1.0\r\nNats-Expected-Last-Subject-Sequence: 99\r\n\r\n"
	for _, c := range []struct {
		name, after string
		wait        time.Duration
		kv          jetstream.KeyValueConfig
	}{
		{"beyond MaxHold", "7200", 2 * time.Hour, jetstream.KeyValueConfig{Bucket: "cairn-limits"}},
		{"a hold that fails", "1", time.Second, jetstream.KeyValueConfig{Bucket: "cairn-limits", MaxValueSize: int32(len(booking) + 5)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, h := newAPI(t)
			_, h = refuseNth(h, 1, http.StatusTooManyRequests, c.after)
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			lim := limiters(t, c.kv, ratelimit.Limit{Bucket: "cairn-limits", Key: "api", PerSecond: 50},
				ratelimit.Config{Unavailable: 200 * time.Millisecond}, 1)[0]
			var mu sync.Mutex
			var waits []time.Duration
			cl := newClient(t, httpidem.ClientConfig{Limiter: lim, MaxRetryAfter: 3 * time.Hour, After: func(d time.Duration) <-chan time.Time {
				mu.Lock()
				waits = append(waits, d)
				mu.Unlock()
				return time.After(0)
			}})
			rc, err := cl.Write(t.Context(), httpidem.Request{URL: srv.URL + "/entries", Key: "k-slow", Body: []byte("a")})
			if err != nil || rc.Status != http.StatusCreated {
				t.Fatalf("write: %+v, %v", rc, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(waits) != 1 || waits[0] != c.wait {
				t.Errorf("waited %v on the client's timer, want [%s]", waits, c.wait)
			}
			if s := lim.Stats(); s.Holds != 0 || s.Grants != 2 {
				t.Errorf("limiter %+v, want no hold and 2 grants", s)
			}
			if n := a.runs.Load(); n != 1 {
				t.Errorf("handler ran %d times, want 1", n)
			}
		})
	}
}

// Each class of a write's failure matches its own class only, and the temporary ones are
// retry.ErrTemporary by themselves, as every temporary error is; the others are not.
func TestErrorClassesAndTheirMarks(t *testing.T) {
	t.Parallel()
	classes := []error{httpidem.ErrInFlight, httpidem.ErrFenced, httpidem.ErrKeyConflict,
		httpidem.ErrRateLimited, httpidem.ErrTemporary, httpidem.ErrRejected}
	temporary := map[error]bool{httpidem.ErrInFlight: true, httpidem.ErrRateLimited: true, httpidem.ErrTemporary: true}
	for _, class := range classes {
		err := &httpidem.Error{Class: class, Key: "k-1"}
		for _, other := range classes {
			if got := errors.Is(err, other); got != (other == class) {
				t.Errorf("an error of class %q is %q: %t", class, other, got)
			}
		}
		if errors.Is(class, retry.ErrTemporary) != temporary[class] || errors.Is(err, retry.ErrTemporary) != temporary[class] {
			t.Errorf("class %q: temporary %t, want %t", class, errors.Is(class, retry.ErrTemporary), temporary[class])
		}
		if errors.Is(err, fence.ErrFenced) != (class == httpidem.ErrFenced) {
			t.Errorf("class %q: fence.ErrFenced %t", class, errors.Is(err, fence.ErrFenced))
		}
	}
	if got := (&httpidem.Error{Class: httpidem.ErrTemporary, Key: "k-1", Status: 502}).Error(); got != "writing k-1: temporary failure of the outside system (502)" {
		t.Errorf("Error() = %q", got)
	}
}
