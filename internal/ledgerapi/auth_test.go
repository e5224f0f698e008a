package ledgerapi_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"math"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cairnhq/cairn/internal/books"
	"github.com/cairnhq/cairn/internal/ledgerapi"
	"github.com/cairnhq/cairn/pkg/fence"
	"github.com/cairnhq/cairn/pkg/httpidem"
)

// send posts body under key with run's token and epoch ("": none sent), signed as b.as.
func (b *bundle) send(t *testing.T, path, key, body, run string, token int64, epoch string) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, b.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		k, err := httpidem.FormatKey(key)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(httpidem.KeyHeader, k)
	}
	req.Header.Set(httpidem.DefaultRunHeader, run)
	req.Header.Set(httpidem.DefaultTokenHeader, strconv.FormatInt(token, 10))
	if epoch != "" {
		req.Header.Set(ledgerapi.EpochHeader, epoch)
	}
	b.sign(req, []byte(body))
	return do(t, req)
}

func (b *bundle) list(t *testing.T, runID string) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, b.url+"/v1/entries?run_id="+url.QueryEscape(runID), nil)
	if err != nil {
		t.Fatal(err)
	}
	b.sign(req, nil)
	return do(t, req)
}

// fenceOf is the ledger's fence of runID: its epoch and token, "" and 0 when none.
func (b *bundle) fenceOf(t *testing.T, runID string) (string, int64) {
	t.Helper()
	var (
		epoch string
		token int64
	)
	err := b.db.SQL().QueryRowContext(t.Context(), books.Rebind(b.db.Dialect(), `SELECT epoch, token FROM fences WHERE run_id = ?`), runID).Scan(&epoch, &token)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		t.Fatal(err)
	}
	return epoch, token
}

// keysHeld is how many idempotency keys the middleware holds.
func (b *bundle) keysHeld(t *testing.T) int {
	t.Helper()
	var n int
	if err := b.db.SQL().QueryRowContext(t.Context(), `SELECT count(*) FROM http_idempotency_keys`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// nothingChanged fails t unless the ledger holds rows rows, no fence of run-x and keys keys.
func (b *bundle) nothingChanged(t *testing.T, what string, rows, keys int) {
	t.Helper()
	if n := b.rows(t); n != rows {
		t.Fatalf("%s: %d rows, want %d", what, n, rows)
	}
	if e, tok := b.fenceOf(t, "run-x"); e != "" || tok != 0 {
		t.Fatalf("%s: run-x's fence raised to %q/%d", what, e, tok)
	}
	if n := b.keysHeld(t); n != keys {
		t.Fatalf("%s: %d keys held, want %d", what, n, keys)
	}
}

// Unsigned requests, and requests signed by a key not registered, are 401 on every route,
// and change nothing: no row, no fence (not even 2^63-1 under a foreign epoch), no key.
func testCallers(t *testing.T, b *bundle) {
	for _, who := range []string{"", "stranger"} {
		c := b.asCaller(who)
		c.send(t, "/v1/entries", "run-x:INV-1:1", strings.ReplaceAll(entryJSON("INV-1", 1, 1000, ""), run, "run-x"), "run-x", 1, "").want(t, http.StatusUnauthorized)
		a := c.send(t, "/v1/fences", "", "", "run-x", math.MaxInt64, "foreign").want(t, http.StatusUnauthorized)
		if a.problem.Type != httpidem.TypeUnauthenticated || a.header.Get("WWW-Authenticate") == "" {
			t.Fatalf("%q: %+v, want %s with WWW-Authenticate", who, a.problem, httpidem.TypeUnauthenticated)
		}
		c.get(t, "run-1:INV-1:1").want(t, http.StatusUnauthorized)
		c.list(t, run).want(t, http.StatusUnauthorized)
		b.nothingChanged(t, "unauthenticated "+who, 0, 0)
	}
	// A signature made for one request does not carry another.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, b.url+"/v1/fences", http.NoBody)
	req.Header.Set(httpidem.DefaultRunHeader, "run-x")
	req.Header.Set(httpidem.DefaultTokenHeader, "1")
	b.sign(req, []byte{})
	req.Header.Set(httpidem.DefaultTokenHeader, strconv.FormatInt(math.MaxInt64, 10))
	do(t, req).want(t, http.StatusUnauthorized)
	b.nothingChanged(t, "a signature moved to another token", 0, 0)
}

// Each route is its callers': post-ledger posts and reads, the compensator reverses and
// reads, both raise fences; any other registered service is 403 everywhere, and the
// compensator's entry that reverses nothing is 403; nothing changes on a 403.
func testRoles(t *testing.T, b *bundle) {
	report := b.asCaller("report")
	report.send(t, "/v1/entries", "run-x:INV-1:1", strings.ReplaceAll(entryJSON("INV-1", 1, 1000, ""), run, "run-x"), "run-x", 1, "").want(t, http.StatusForbidden)
	a := report.send(t, "/v1/fences", "", "", "run-x", math.MaxInt64, "").want(t, http.StatusForbidden)
	if a.problem.Type != httpidem.TypeForbidden || a.problem.Extensions["caller"] != "report" {
		t.Fatalf("report raising a fence: %+v, want %s naming the caller", a.problem, httpidem.TypeForbidden)
	}
	report.get(t, "k1").want(t, http.StatusForbidden)
	report.list(t, run).want(t, http.StatusForbidden)
	b.nothingChanged(t, "report", 0, 0)

	comp := b.asCaller(ledgerapi.CallerCompensator)
	comp.send(t, "/v1/entries", "run-x:INV-1:1", strings.ReplaceAll(entryJSON("INV-1", 1, 1000, ""), run, "run-x"), "run-x", 1, "").want(t, http.StatusForbidden)
	b.nothingChanged(t, "the compensator posting an entry", 0, 0)

	b.post(t, "k1", entryJSON("INV-1", 1, 1000, ""), 2).want(t, http.StatusCreated)
	b.get(t, "k1").want(t, http.StatusOK)
	comp.get(t, "k1").want(t, http.StatusOK)
	comp.list(t, run).want(t, http.StatusOK)
	comp.post(t, "k1:rev", entryJSON("INV-1", 1, -1000, "k1"), 3).want(t, http.StatusCreated)
	comp.send(t, "/v1/fences", "", "", run, 4, ledgerapi.DefaultEpoch).want(t, http.StatusOK)
	b.send(t, "/v1/fences", "", "", run, 5, ledgerapi.DefaultEpoch).want(t, http.StatusOK)
	if n := b.rows(t); n != 2 {
		t.Fatalf("%d rows, want post-ledger's entry and the compensator's reversal", n)
	}
}

// A body that is not the one its Content-Digest names is 400 with nothing written; a
// signed write without a digest is 400 too.
func testDigest(t *testing.T, b *bundle) {
	body := entryJSON("INV-1", 1, 1000, "")
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, b.url+"/v1/entries", strings.NewReader(strings.Replace(body, "1000", "9000", 1)))
	req.Header.Set(httpidem.KeyHeader, `"k1"`)
	req.Header.Set(httpidem.DefaultRunHeader, run)
	req.Header.Set(httpidem.DefaultTokenHeader, "1")
	b.sign(req, []byte(body)) // the digest of the body as signed, not as sent
	if a := do(t, req).want(t, http.StatusBadRequest); a.problem.Type != httpidem.TypeDigestMismatch {
		t.Fatalf("a changed body: %+v, want %s", a.problem, httpidem.TypeDigestMismatch)
	}
	req, _ = http.NewRequestWithContext(t.Context(), http.MethodPost, b.url+"/v1/entries", strings.NewReader(body))
	req.Header.Set(httpidem.KeyHeader, `"k1"`)
	req.Header.Set(httpidem.DefaultRunHeader, run)
	req.Header.Set(httpidem.DefaultTokenHeader, "1")
	httpidem.Sign(req, nil, b.keys.signers[b.as], time.Now(), ledgerapi.EpochHeader)
	if a := do(t, req).want(t, http.StatusBadRequest); a.problem.Type != httpidem.TypeDigestMissing {
		t.Fatalf("no digest: %+v, want %s", a.problem, httpidem.TypeDigestMissing)
	}
	if e, tok := b.fenceOf(t, run); b.rows(t) != 0 || b.keysHeld(t) != 0 || e != "" || tok != 0 {
		t.Fatal("a refused digest changed the ledger")
	}
	b.post(t, "k1", body, 1).want(t, http.StatusCreated)
}

// The same key and body under another run's headers is never the first run's answer: 422,
// nothing changed, and the first run's repeat still gets its own answer.
func testOtherRunHeaders(t *testing.T, b *bundle) {
	body := entryJSON("INV-1", 1, 1000, "")
	first := b.send(t, "/v1/entries", "k1", body, run, 2, "").want(t, http.StatusCreated)
	a := b.send(t, "/v1/entries", "k1", body, "run-x", 9, "").want(t, http.StatusUnprocessableEntity)
	if a.replayed || bytes.Equal(a.body, first.body) {
		t.Fatalf("run-x got run-1's answer: %s", a.body)
	}
	b.nothingChanged(t, "a repeat under run-x's headers", 1, 1)
	again := b.send(t, "/v1/entries", "k1", body, run, 2, "").want(t, http.StatusCreated)
	if !again.replayed || !bytes.Equal(again.body, first.body) {
		t.Fatalf("run-1's repeat: %s (replayed %v), want its first answer", again.body, again.replayed)
	}
}

// After `cairn fences adopt` moved the run's fence to a new epoch at a lower token, the
// new epoch's writes go through and the old epoch's are refused as foreign, as by SQL.
func testAdoptedEpoch(t *testing.T, b *bundle) {
	b.send(t, "/v1/entries", "k1", entryJSON("INV-1", 1, 1000, ""), run, 500, "epoch-old").want(t, http.StatusCreated)
	if err := b.db.Ledger(false).AdoptFence(t.Context(), fence.Token{RunID: run, Epoch: "epoch-new", Value: 3}); err != nil {
		t.Fatal(err)
	}
	b.send(t, "/v1/entries", "k2", entryJSON("INV-1", 2, 2000, ""), run, 3, "epoch-new").want(t, http.StatusCreated)
	b.send(t, "/v1/fences", "", "", run, 4, "epoch-new").want(t, http.StatusOK)
	a := b.send(t, "/v1/entries", "k3", entryJSON("INV-1", 3, 3000, ""), run, 600, "epoch-old").want(t, http.StatusConflict)
	if a.problem.Type != ledgerapi.TypeForeignEpoch {
		t.Fatalf("the old epoch's write: %+v, want %s", a.problem, ledgerapi.TypeForeignEpoch)
	}
	if e, tok := b.fenceOf(t, run); e != "epoch-new" || tok != 4 || b.rows(t) != 2 {
		t.Fatalf("fence %s/%d, %d rows; want epoch-new/4 and 2 rows", e, tok, b.rows(t))
	}
}

// A server that dies between the ledger's write and storing its answer leaves the key in
// flight; the retry (here to another server on the same database, as after a restart) is
// answered from the row the write left, and so is every later one.
func testCrashAfterWrite(t *testing.T, b0 *bundle) {
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "crash.db")
	entered, dead := make(chan struct{}), make(chan struct{})
	crashing := setupHooks(t, b0.keys, dsn, ledgerapi.Hooks{AfterWrite: func(context.Context) {
		close(entered)
		<-dead // the process is gone: its answer is never stored nor its claim released
	}})
	t.Cleanup(func() { close(dead) })
	body := entryJSON("INV-1", 1, 1000, "")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, crashing.url+"/v1/entries", strings.NewReader(body))
		req.Header.Set(httpidem.KeyHeader, `"k1"`)
		req.Header.Set(httpidem.DefaultRunHeader, run)
		req.Header.Set(httpidem.DefaultTokenHeader, "1")
		crashing.sign(req, []byte(body))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case <-entered:
	case <-time.After(time.Minute):
		t.Fatal("the first request never wrote")
	}
	restarted := setup(t, b0.keys, dsn)
	for i := range 2 {
		a := restarted.post(t, "k1", body, 1).want(t, http.StatusCreated)
		e, _, err := restarted.db.Ledger(false).Get(t.Context(), "k1")
		if err != nil || !a.replayed || !strings.Contains(string(a.body), `"amount_paise":1000`) || a.header.Get("Location") != "/v1/entries/k1" {
			t.Fatalf("retry %d: %d %s (replayed %v, Location %q), %+v %v; want the row's 201 replayed", i, a.status, a.body, a.replayed, a.header.Get("Location"), e, err)
		}
	}
	if n := restarted.rows(t); n != 1 {
		t.Fatalf("%d rows, want the one the first request wrote", n)
	}
}
