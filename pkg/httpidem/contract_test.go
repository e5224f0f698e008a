package httpidem_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"

	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/cairnhq/cairn/internal/pgtest"
	"github.com/cairnhq/cairn/pkg/httpidem"
)

// stores are the implementations every contract test runs against.
var stores = []struct {
	name string
	open func(t *testing.T) *httpidem.SQLStore
}{
	{"sqlite", func(t *testing.T) *httpidem.SQLStore {
		// The connection settings of the ledger's SQLite store (DESIGN.md).
		path := filepath.Join(t.TempDir(), "idem.db")
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)&_txlock=immediate")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return httpidem.NewSQLiteStore(db)
	}},
	{"postgres", func(t *testing.T) *httpidem.SQLStore {
		cfg, err := pgx.ParseConfig(pgtest.DSN(t))
		if err != nil {
			t.Fatal(err)
		}
		db := stdlib.OpenDB(*cfg)
		t.Cleanup(func() { db.Close() })
		return httpidem.NewPostgresStore(db)
	}},
}

func TestContract(t *testing.T) {
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range contract {
				t.Run(c.name, func(t *testing.T) {
					store := s.open(t)
					if err := store.CreateTables(t.Context()); err != nil {
						t.Fatal(err)
					}
					c.test(t, store)
				})
			}
		})
	}
}

var contract = []struct {
	name string
	test func(t *testing.T, store *httpidem.SQLStore)
}{
	{"FirstRunsOnceRepeatReplays", testReplay},
	{"ChangedPayload422", testChangedPayload},
	{"ConcurrentDuplicates409", testConcurrent},
	{"OlderFenceToken409", testFence},
	{"Expiry", testExpiry},
	{"ServerErrorReleases", testServerError},
	{"PanicReleases", testPanic},
	{"MissingKeyRequired400", testMissingKey},
	{"BadKey400", testBadKey},
	{"PassThrough", testPassThrough},
	{"Scope", testScope},
	{"StoreClaimLost", testClaimLost},
	{"DigestMismatch400", testDigestMismatch},
	{"OtherRun422", testOtherRun},
	{"InFlightRecovered", testRecovered},
}

// bundle is a server under test and what its handler saw.
type bundle struct {
	url   string
	calls atomic.Int64
	clock *clock
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *clock) Add(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.now = c.now.Add(d) }

// setup serves handler, counted, behind the middleware on store.
func setup(t *testing.T, store httpidem.Store, handler http.HandlerFunc, opts ...httpidem.Option) *bundle {
	t.Helper()
	b := &bundle{clock: &clock{now: time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)}}
	opts = append([]httpidem.Option{httpidem.WithClock(b.clock.Now)}, opts...)
	mw := httpidem.New(store, opts...)
	srv := httptest.NewUnstartedServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.calls.Add(1)
		handler(w, r)
	})))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panic test's panic
	srv.Start()
	t.Cleanup(srv.Close)
	b.url = srv.URL
	return b
}

// created answers 201 with a body that names the call, so that a replay is told apart
// from a second run.
func created(b **bundle) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/v1/entries/1")
		w.Header().Set("X-Not-Stored", "x")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"call":%d,"got":%q}`, (*b).calls.Load(), body)
	}
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) problem(t *testing.T) httpidem.Problem {
	t.Helper()
	if ct := a.header.Get("Content-Type"); ct != httpidem.ContentTypeProblem {
		t.Fatalf("Content-Type %q, want %s; body %s", ct, httpidem.ContentTypeProblem, a.body)
	}
	var p httpidem.Problem
	if err := json.Unmarshal(a.body, &p); err != nil {
		t.Fatalf("problem body %s: %v", a.body, err)
	}
	if p.Status != a.status {
		t.Errorf("problem status %d, answer status %d", p.Status, a.status)
	}
	return p
}

func send(t *testing.T, url, key, body string, headers ...string) (answer, error) {
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/v1/entries", bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

func post(t *testing.T, url, key, body string, headers ...string) answer {
	t.Helper()
	a, err := send(t, url, key, body, headers...)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func testReplay(t *testing.T, store *httpidem.SQLStore) {
	var b *bundle
	b = setup(t, store, created(&b))
	first := post(t, b.url, `"k-1"`, `{"amount":5}`)
	if first.status != http.StatusCreated || first.header.Get(httpidem.ReplayedHeader) != "" {
		t.Fatalf("first: %d %v %s", first.status, first.header, first.body)
	}
	for i := range 3 {
		// The bare form of the same key is the same key.
		k := `"k-1"`
		if i%2 == 1 {
			k = "k-1"
		}
		again := post(t, b.url, k, `{"amount":5}`)
		if again.status != first.status || !bytes.Equal(again.body, first.body) {
			t.Fatalf("repeat %d: %d %s, want %d %s", i, again.status, again.body, first.status, first.body)
		}
		if again.header.Get(httpidem.ReplayedHeader) != "true" {
			t.Errorf("repeat %d: %s %q, want true", i, httpidem.ReplayedHeader, again.header.Get(httpidem.ReplayedHeader))
		}
		for _, h := range []string{"Content-Type", "Location"} {
			if again.header.Get(h) != first.header.Get(h) {
				t.Errorf("repeat %d: %s %q, want %q", i, h, again.header.Get(h), first.header.Get(h))
			}
		}
		if again.header.Get("X-Not-Stored") != "" {
			t.Errorf("repeat %d: a header not chosen to be stored was replayed", i)
		}
	}
	if n := b.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	if other := post(t, b.url, "k-2", `{"amount":5}`); other.status != http.StatusCreated || b.calls.Load() != 2 {
		t.Fatalf("another key: %d, %d calls", other.status, b.calls.Load())
	}
}

func testChangedPayload(t *testing.T, store *httpidem.SQLStore) {
	var b *bundle
	b = setup(t, store, created(&b))
	post(t, b.url, "k", `{"amount":5}`)
	a := post(t, b.url, "k", `{"amount":6}`)
	if a.status != http.StatusUnprocessableEntity {
		t.Fatalf("changed payload: %d %s, want 422", a.status, a.body)
	}
	p := a.problem(t)
	if p.Type != httpidem.TypeKeyReused || p.Extensions["key"] != "k" {
		t.Errorf("problem %+v, want type %s naming key k", p, httpidem.TypeKeyReused)
	}
	if n := b.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

func testConcurrent(t *testing.T, store *httpidem.SQLStore) {
	const n = 6
	entered := make(chan struct{}, n)
	release := make(chan struct{})
	b := setup(t, store, func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "made")
	})
	results := make(chan answer, n)
	for range n {
		go func() {
			a, err := send(t, b.url, "dup", "same")
			if err != nil {
				a = answer{status: -1, body: []byte(err.Error())}
			}
			results <- a
		}()
	}
	deadline := time.After(time.Minute)
	// While the one claimer is held in the handler, every other copy is refused.
	for i := range n - 1 {
		select {
		case a := <-results:
			if a.status != http.StatusConflict {
				t.Fatalf("duplicate %d: %d %s, want 409", i, a.status, a.body)
			}
			if p := a.problem(t); p.Type != httpidem.TypeKeyInFlight || p.Extensions["key"] != "dup" {
				t.Errorf("problem %+v, want type %s naming key dup", p, httpidem.TypeKeyInFlight)
			}
		case <-deadline:
			t.Fatalf("only %d of %d duplicates answered", i, n-1)
		}
	}
	select {
	case <-entered:
	case <-deadline:
		t.Fatal("the handler never ran")
	}
	// Another payload under the key in flight is refused as reused, not asked to wait.
	if a := post(t, b.url, "dup", "other"); a.status != http.StatusUnprocessableEntity || a.problem(t).Type != httpidem.TypeKeyReused {
		t.Fatalf("another payload in flight: %d %s, want 422", a.status, a.body)
	}
	close(release)
	select {
	case a := <-results:
		if a.status != http.StatusCreated || string(a.body) != "made" {
			t.Fatalf("the claimer: %d %s", a.status, a.body)
		}
	case <-deadline:
		t.Fatal("the claimer never answered")
	}
	if c := b.calls.Load(); c != 1 {
		t.Fatalf("handler ran %d times, want 1", c)
	}
	if a := post(t, b.url, "dup", "same"); a.status != http.StatusCreated || a.header.Get(httpidem.ReplayedHeader) != "true" {
		t.Fatalf("after: %d %v", a.status, a.header)
	}
}

func testFence(t *testing.T, store *httpidem.SQLStore) {
	var b *bundle
	b = setup(t, store, created(&b))
	fence := func(run string, token int64) []string {
		return []string{"Cairn-Run", run, "Cairn-Fence-Token", strconv.FormatInt(token, 10)}
	}
	if a := post(t, b.url, "f-1", "x", fence("run-1", 5)...); a.status != http.StatusCreated {
		t.Fatalf("token 5: %d %s", a.status, a.body)
	}
	a := post(t, b.url, "f-2", "x", fence("run-1", 3)...)
	if a.status != http.StatusConflict {
		t.Fatalf("older token: %d %s, want 409", a.status, a.body)
	}
	p := a.problem(t)
	if p.Type != httpidem.TypeFenced || p.Extensions["token"] != float64(3) || p.Extensions["highest"] != float64(5) || p.Extensions["run"] != "run-1" {
		t.Errorf("problem %s, want type %s naming run-1, token 3 and highest 5", a.body, httpidem.TypeFenced)
	}
	if n := b.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1: the fenced request reached it", n)
	}
	// The refused key was never claimed: with a current token it runs.
	if a := post(t, b.url, "f-2", "x", fence("run-1", 5)...); a.status != http.StatusCreated || b.calls.Load() != 2 {
		t.Fatalf("equal token: %d %s, %d calls", a.status, a.body, b.calls.Load())
	}
	if a := post(t, b.url, "f-3", "x", fence("run-1", 9)...); a.status != http.StatusCreated || b.calls.Load() != 3 {
		t.Fatalf("higher token: %d %s", a.status, a.body)
	}
	if a := post(t, b.url, "f-4", "x", fence("run-1", 5)...); a.status != http.StatusConflict || a.problem(t).Extensions["highest"] != float64(9) {
		t.Fatalf("token 5 after 9: %d %s, want 409 naming 9", a.status, a.body)
	}
	// Runs are fenced apart, and a request without the headers is not fenced.
	if a := post(t, b.url, "f-5", "x", fence("run-2", 1)...); a.status != http.StatusCreated {
		t.Fatalf("other run: %d %s", a.status, a.body)
	}
	if a := post(t, b.url, "f-6", "x"); a.status != http.StatusCreated {
		t.Fatalf("no fence: %d %s", a.status, a.body)
	}
	if a := post(t, b.url, "f-7", "x", "Cairn-Run", "run-1"); a.status != http.StatusBadRequest || a.problem(t).Type != httpidem.TypeFenceInvalid {
		t.Fatalf("run without token: %d %s, want 400", a.status, a.body)
	}
}

func testExpiry(t *testing.T, store *httpidem.SQLStore) {
	var b *bundle
	b = setup(t, store, created(&b), httpidem.WithExpiry(time.Hour))
	first := post(t, b.url, "e", "x")
	b.clock.Add(time.Hour - time.Nanosecond)
	if a := post(t, b.url, "e", "x"); !bytes.Equal(a.body, first.body) || b.calls.Load() != 1 {
		t.Fatalf("inside the window: %s, %d calls", a.body, b.calls.Load())
	}
	b.clock.Add(time.Nanosecond)
	a := post(t, b.url, "e", "other payload")
	if a.status != http.StatusCreated || a.header.Get(httpidem.ReplayedHeader) != "" || b.calls.Load() != 2 {
		t.Fatalf("past the window: %d %s, %d calls; want a second run", a.status, a.body, b.calls.Load())
	}
	if again := post(t, b.url, "e", "other payload"); !bytes.Equal(again.body, a.body) || b.calls.Load() != 2 {
		t.Fatalf("the replaced key: %s, want %s", again.body, a.body)
	}
}

func testServerError(t *testing.T, store *httpidem.SQLStore) {
	var b *bundle
	b = setup(t, store, func(w http.ResponseWriter, r *http.Request) {
		if b.calls.Load() == 1 {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		created(&b)(w, r)
	})
	if a := post(t, b.url, "s", "x"); a.status != http.StatusInternalServerError {
		t.Fatalf("first: %d %s", a.status, a.body)
	}
	if a := post(t, b.url, "s", "x"); a.status != http.StatusCreated || b.calls.Load() != 2 {
		t.Fatalf("retry: %d %s, %d calls; want the handler run again", a.status, a.body, b.calls.Load())
	}
	// A 4xx answer is stored like a 2xx.
	b2 := setup(t, store, func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", http.StatusNotFound) })
	post(t, b2.url, "s4", "x")
	if a := post(t, b2.url, "s4", "x"); a.status != http.StatusNotFound || a.header.Get(httpidem.ReplayedHeader) != "true" || b2.calls.Load() != 1 {
		t.Fatalf("4xx repeat: %d, %d calls; want the stored 404", a.status, b2.calls.Load())
	}
}

func testPanic(t *testing.T, store *httpidem.SQLStore) {
	var b *bundle
	b = setup(t, store, func(w http.ResponseWriter, r *http.Request) {
		if b.calls.Load() == 1 {
			panic("handler bug")
		}
		created(&b)(w, r)
	})
	if _, err := send(t, b.url, "p", "x"); err == nil {
		t.Fatal("the panicking request got an answer")
	}
	if a := post(t, b.url, "p", "x"); a.status != http.StatusCreated || b.calls.Load() != 2 {
		t.Fatalf("retry: %d %s, %d calls; want the handler run again", a.status, a.body, b.calls.Load())
	}
}

func testMissingKey(t *testing.T, store *httpidem.SQLStore) {
	var b *bundle
	b = setup(t, store, created(&b), httpidem.WithKeyRequired())
	a := post(t, b.url, "", "x")
	if a.status != http.StatusBadRequest || a.problem(t).Type != httpidem.TypeKeyMissing || b.calls.Load() != 0 {
		t.Fatalf("no key: %d %s, %d calls; want 400", a.status, a.body, b.calls.Load())
	}
}

func testBadKey(t *testing.T, store *httpidem.SQLStore) {
	var b *bundle
	b = setup(t, store, created(&b))
	long := make([]byte, httpidem.MaxKeyLen+1)
	for i := range long {
		long[i] = 'a'
	}
	for _, k := range []string{`"unterminated`, `"bad\escape"`, `a,b`, `"k";p=1`, `""`, string(long)} {
		a := post(t, b.url, k, "x")
		if a.status != http.StatusBadRequest || a.problem(t).Type != httpidem.TypeKeyInvalid {
			t.Errorf("key %.20q: %d %s, want 400", k, a.status, a.body)
		}
	}
	a := post(t, b.url, string(long), "x")
	if p := a.problem(t); p.Extensions["max_length"] != float64(httpidem.MaxKeyLen) {
		t.Errorf("too long: %s, want the limit named", a.body)
	}
	if n := b.calls.Load(); n != 0 {
		t.Fatalf("handler ran %d times, want 0", n)
	}
}

func testPassThrough(t *testing.T, store *httpidem.SQLStore) {
	var b *bundle
	b = setup(t, store, created(&b))
	post(t, b.url, "", "x")
	post(t, b.url, "", "x")
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, b.url+"/v1/entries/1", nil)
	req.Header.Set("Idempotency-Key", "g")
	for range 2 {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if n := b.calls.Load(); n != 4 {
		t.Fatalf("handler ran %d times, want 4: keyless POSTs and GETs pass through", n)
	}
}

func testScope(t *testing.T, store *httpidem.SQLStore) {
	var b *bundle
	b = setup(t, store, created(&b), httpidem.WithScope(func(r *http.Request) string { return r.Header.Get("X-Account") }))
	post(t, b.url, "k", "x", "X-Account", "acct-1")
	if a := post(t, b.url, "k", "y", "X-Account", "acct-2"); a.status != http.StatusCreated || b.calls.Load() != 2 {
		t.Fatalf("same key, other client: %d %s; want its own run", a.status, a.body)
	}
	if a := post(t, b.url, "k", "y", "X-Account", "acct-1"); a.status != http.StatusUnprocessableEntity || a.problem(t).Extensions["key"] != "k" {
		t.Fatalf("same key, same client, other payload: %d %s; want 422 naming k", a.status, a.body)
	}
}

// testClaimLost drives the store alone: a claim that outlives its window loses the key
// to the next one, and can neither store its answer over it nor release it.
func testClaimLost(t *testing.T, store *httpidem.SQLStore) {
	ctx := t.Context()
	t0 := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	c1 := httpidem.Claim{Key: "lost", Fingerprint: "sha256:1", ID: "c1", Now: t0, Expires: t0.Add(time.Minute)}
	c2 := httpidem.Claim{Key: "lost", Fingerprint: "sha256:2", ID: "c2", Now: t0.Add(time.Minute), Expires: t0.Add(2 * time.Minute)}
	for _, step := range []struct {
		c    httpidem.Claim
		want httpidem.State
	}{{c1, httpidem.Claimed}, {c1, httpidem.InFlight}, {c2, httpidem.Claimed}} {
		out, err := store.Claim(ctx, step.c)
		if err != nil || out.State != step.want {
			t.Fatalf("claim %s: %v, %v; want %v", step.c.ID, out.State, err, step.want)
		}
	}
	if err := store.Complete(ctx, c1, httpidem.Answer{Status: 201}); !errors.Is(err, httpidem.ErrClaimLost) {
		t.Fatalf("completing the lost claim: %v, want ErrClaimLost", err)
	}
	if err := store.Release(ctx, c1); err != nil {
		t.Fatal(err)
	}
	if err := store.Complete(ctx, c2, httpidem.Answer{Status: 201, Body: []byte("two")}); err != nil {
		t.Fatalf("completing the live claim: %v", err)
	}
	c2.Now = c2.Now.Add(time.Second)
	out, err := store.Claim(ctx, c2)
	if err != nil || out.State != httpidem.Done || out.Fingerprint != "sha256:2" || string(out.Answer.Body) != "two" || out.Answer.Status != 201 {
		t.Fatalf("after: %+v, %v; want c2's answer", out, err)
	}
}

func TestStoreDown(t *testing.T) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "idem.db"))
	if err != nil {
		t.Fatal(err)
	}
	store := httpidem.NewSQLiteStore(db)
	if err := store.CreateTables(t.Context()); err != nil {
		t.Fatal(err)
	}
	var b *bundle
	b = setup(t, store, created(&b))
	db.Close()
	a := post(t, b.url, "k", "x")
	if a.status != http.StatusServiceUnavailable || a.problem(t).Type != httpidem.TypeStore || b.calls.Load() != 0 {
		t.Fatalf("store down: %d %s, %d calls; want 503 and no run", a.status, a.body, b.calls.Load())
	}
}
