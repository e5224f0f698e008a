package ledgerapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnhq/cairn/internal/books"
	"github.com/cairnhq/cairn/internal/ledgerapi"
	"github.com/cairnhq/cairn/internal/pgtest"
	"github.com/cairnhq/cairn/pkg/fence"
	"github.com/cairnhq/cairn/pkg/httpidem"
)

// databases are the ledger's databases the tests run on: a SQLite file and PostgreSQL.
var databases = []struct {
	name string
	dsn  func(t *testing.T) string
}{
	{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "ledger.db") }},
	{"postgres", func(t *testing.T) string { return pgtest.DSN(t) }},
}

// The contract of the ledger API, on a SQLite file and on PostgreSQL, over real HTTP on
// loopback.
func TestLedgerAPI(t *testing.T) {
	k := newKeys(t)
	for _, db := range databases {
		t.Run(db.name, func(t *testing.T) {
			for _, tc := range []struct {
				name string
				fn   func(t *testing.T, b *bundle)
			}{
				{"post writes the row", testPost},
				{"repeat replays", testRepeat},
				{"changed payload", testChangedPayload},
				{"older token", testOlderToken},
				{"fence raised by the SQL path", testSQLFence},
				{"fence raised during the write", testFenceDuringWrite},
				{"get", testGet},
				{"reversal", testReversal},
				{"malformed", testMalformed},
				{"callers", testCallers},
				{"roles", testRoles},
				{"digest", testDigest},
				{"another run's headers", testOtherRunHeaders},
				{"epoch adopted", testAdoptedEpoch},
				{"crash after the write", testCrashAfterWrite},
			} {
				t.Run(tc.name, func(t *testing.T) { tc.fn(t, setup(t, k, db.dsn(t))) })
			}
		})
	}
}

type bundle struct {
	url  string
	db   *books.DB
	keys *keys
	as   string // the service the requests are signed as ("": unsigned)
}

func setup(t *testing.T, k *keys, dsn string) *bundle {
	return setupHooks(t, k, dsn, ledgerapi.Hooks{})
}

func setupHooks(t *testing.T, k *keys, dsn string, hooks ledgerapi.Hooks) *bundle {
	t.Helper()
	db, err := books.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := ledgerapi.CreateTables(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	h, err := ledgerapi.HandlerWithHooks(ledgerapi.Config{DB: db, Ring: k.ring}, hooks)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &bundle{url: srv.URL, db: db, keys: k, as: ledgerapi.CallerPostLedger}
}

// sign signs req as b.as, its body being body (nil: none).
func (b *bundle) sign(req *http.Request, body []byte) {
	if b.as != "" {
		httpidem.Sign(req, body, b.keys.signers[b.as], time.Now(), ledgerapi.EpochHeader)
	}
}

// asCaller is b sending as service name.
func (b *bundle) asCaller(name string) *bundle {
	c := *b
	c.as = name
	return &c
}

const run = "run-1"

func entryJSON(invoice string, line int, amount int64, reverses string) string {
	rev := "null"
	if reverses != "" {
		rev = strconv.Quote(reverses)
	}
	return `{"run_id":"` + run + `","invoice_no":"` + invoice + `","line":` + strconv.Itoa(line) +
		`,"kind":"payable","supplier_id":"SUP-1","amount_paise":` + strconv.FormatInt(amount, 10) +
		`,"reverses":` + rev + `,"created_at":"2026-12-01T22:00:00Z"}`
}

type answer struct {
	status   int
	header   http.Header
	body     []byte
	problem  httpidem.Problem
	replayed bool
}

func (b *bundle) post(t *testing.T, key, body string, token int64) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, b.url+"/v1/entries", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		k, err := httpidem.FormatKey(key)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(httpidem.KeyHeader, k)
	}
	if token >= 0 {
		req.Header.Set(httpidem.DefaultRunHeader, run)
		req.Header.Set(httpidem.DefaultTokenHeader, strconv.FormatInt(token, 10))
	}
	b.sign(req, []byte(body))
	return do(t, req)
}

func (b *bundle) get(t *testing.T, key string) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, b.url+"/v1/entries/"+url.PathEscape(key), nil)
	if err != nil {
		t.Fatal(err)
	}
	b.sign(req, nil)
	return do(t, req)
}

func do(t *testing.T, req *http.Request) answer {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := answer{status: resp.StatusCode, header: resp.Header, body: body, replayed: resp.Header.Get(httpidem.ReplayedHeader) == "true"}
	if resp.StatusCode >= 400 {
		if ct := resp.Header.Get("Content-Type"); ct != httpidem.ContentTypeProblem {
			t.Fatalf("%d answered as %q, want %s: %s", resp.StatusCode, ct, httpidem.ContentTypeProblem, body)
		}
		if err := json.Unmarshal(body, &a.problem); err != nil {
			t.Fatalf("problem body %s: %v", body, err)
		}
	}
	return a
}

func (a answer) want(t *testing.T, status int) answer {
	t.Helper()
	if a.status != status {
		t.Fatalf("status %d, want %d: %s", a.status, status, a.body)
	}
	return a
}

func (b *bundle) rows(t *testing.T) int {
	t.Helper()
	var n int
	if err := b.db.SQL().QueryRowContext(t.Context(), `SELECT count(*) FROM ledger_entries`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func testPost(t *testing.T, b *bundle) {
	for i := 1; i <= 3; i++ {
		b.post(t, "run-1:INV-1:"+strconv.Itoa(i), entryJSON("INV-1", i, int64(1000*i), ""), 5).want(t, http.StatusCreated)
	}
	if n := b.rows(t); n != 3 {
		t.Fatalf("%d rows in ledger_entries, want the 3 posted", n)
	}
	e, ok, err := b.db.Ledger(false).Get(t.Context(), "run-1:INV-1:2")
	if err != nil || !ok {
		t.Fatalf("Get: %v %v", ok, err)
	}
	want := books.Entry{Key: "run-1:INV-1:2", RunID: run, InvoiceNo: "INV-1", Line: 2, Kind: "payable", SupplierID: "SUP-1", AmountPaise: 2000, CreatedAt: "2026-12-01T22:00:00Z"}
	if e != want {
		t.Fatalf("row %+v, want %+v", e, want)
	}
}

func testRepeat(t *testing.T, b *bundle) {
	first := b.post(t, "k1", entryJSON("INV-1", 1, 1000, ""), 5).want(t, http.StatusCreated)
	again := b.post(t, "k1", entryJSON("INV-1", 1, 1000, ""), 5).want(t, http.StatusCreated)
	if !again.replayed || !bytes.Equal(first.body, again.body) {
		t.Fatalf("repeat: replayed %v, body %s, want the first answer %s replayed", again.replayed, again.body, first.body)
	}
	if n := b.rows(t); n != 1 {
		t.Fatalf("%d rows after a repeat, want 1", n)
	}
}

func testChangedPayload(t *testing.T, b *bundle) {
	b.post(t, "k1", entryJSON("INV-1", 1, 1000, ""), 5).want(t, http.StatusCreated)
	a := b.post(t, "k1", entryJSON("INV-1", 1, 9999, ""), 5).want(t, http.StatusUnprocessableEntity)
	if a.problem.Type != httpidem.TypeKeyReused || a.problem.Extensions["key"] != "k1" {
		t.Fatalf("problem %+v, want %s naming k1", a.problem, httpidem.TypeKeyReused)
	}
	e, _, err := b.db.Ledger(false).Get(t.Context(), "k1")
	if err != nil || e.AmountPaise != 1000 || b.rows(t) != 1 {
		t.Fatalf("after a changed payload: %+v %v, %d rows; want the first row alone", e, err, b.rows(t))
	}
}

func testOlderToken(t *testing.T, b *bundle) {
	b.post(t, "k1", entryJSON("INV-1", 1, 1000, ""), 7).want(t, http.StatusCreated)
	a := b.post(t, "k2", entryJSON("INV-1", 2, 2000, ""), 6).want(t, http.StatusConflict)
	p := a.problem
	if p.Type != httpidem.TypeFenced || p.Extensions["token"] != float64(6) || p.Extensions["highest"] != float64(7) || p.Extensions["key"] != "k2" {
		t.Fatalf("problem %+v, want fenced naming token 6, highest 7 and key k2", p)
	}
	if !strings.Contains(p.Detail, "6") || !strings.Contains(p.Detail, "7") {
		t.Fatalf("detail %q names not both tokens", p.Detail)
	}
	if n := b.rows(t); n != 1 {
		t.Fatalf("%d rows after a fenced write, want 1", n)
	}
	// Nothing was claimed: the key is free for the run's holder.
	b.post(t, "k2", entryJSON("INV-1", 2, 2000, ""), 7).want(t, http.StatusCreated)
	// A write without the token is refused: the ledger is fenced.
	b.post(t, "k3", entryJSON("INV-1", 3, 3000, ""), -1).want(t, http.StatusPreconditionRequired)
}

// A newer holder that wrote over SQL raised the ledger's own fence (not the middleware's):
// the stale request is refused by it, and its key stays free for the newer holder.
func testSQLFence(t *testing.T, b *bundle) {
	if err := b.db.Ledger(false).RaiseFence(t.Context(), fence.Token{RunID: run, Epoch: ledgerapi.DefaultEpoch, Value: 9}); err != nil {
		t.Fatal(err)
	}
	a := b.post(t, "k1", entryJSON("INV-1", 1, 1000, ""), 8).want(t, http.StatusConflict)
	if a.problem.Extensions["token"] != float64(8) || a.problem.Extensions["highest"] != float64(9) {
		t.Fatalf("problem %+v, want tokens 8 and 9", a.problem)
	}
	if b.rows(t) != 0 {
		t.Fatal("a row was written under a stale token")
	}
	b.post(t, "k1", entryJSON("INV-1", 1, 1000, ""), 9).want(t, http.StatusCreated)
}

func testGet(t *testing.T, b *bundle) {
	b.post(t, "run-1:INV-7:1", entryJSON("INV-7", 1, 4200, ""), 1).want(t, http.StatusCreated)
	a := b.get(t, "run-1:INV-7:1").want(t, http.StatusOK)
	var got map[string]any
	if err := json.Unmarshal(a.body, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"key": "run-1:INV-7:1", "run_id": run, "invoice_no": "INV-7", "line": float64(1), "kind": "payable",
		"supplier_id": "SUP-1", "amount_paise": float64(4200), "reverses": nil, "created_at": "2026-12-01T22:00:00Z"}
	if len(got) != len(want) {
		t.Fatalf("GET %s, want %v", a.body, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("GET %s: %s is %v, want %v", a.body, k, got[k], v)
		}
	}
	if p := b.get(t, "nope").want(t, http.StatusNotFound).problem; p.Type != ledgerapi.TypeNotFound || p.Extensions["key"] != "nope" {
		t.Fatalf("absent key: %+v", p)
	}
}

func testReversal(t *testing.T, b *bundle) {
	b.post(t, "k1", entryJSON("INV-1", 1, 1000, ""), 1).want(t, http.StatusCreated)
	a := b.post(t, "k1:rev", entryJSON("INV-1", 1, -999, "k1"), 1).want(t, http.StatusUnprocessableEntity)
	if a.problem.Type != ledgerapi.TypeRefused || a.problem.Extensions["ledger_error"] != books.ErrNotNegation.Error() {
		t.Fatalf("problem %+v, want %s naming %q", a.problem, ledgerapi.TypeRefused, books.ErrNotNegation)
	}
	if b.rows(t) != 1 {
		t.Fatal("a wrong reversal was written")
	}
	b.post(t, "k1:rev2", entryJSON("INV-1", 1, -1000, "k1"), 1).want(t, http.StatusCreated)
	a = b.post(t, "k1:rev3", entryJSON("INV-1", 1, -1000, "k1"), 1).want(t, http.StatusUnprocessableEntity)
	if a.problem.Extensions["ledger_error"] != books.ErrAlreadyReversed.Error() {
		t.Fatalf("second reversal: %+v, want %q", a.problem, books.ErrAlreadyReversed)
	}
	a = b.post(t, "k9:rev", entryJSON("INV-9", 1, -1000, "k9"), 1).want(t, http.StatusUnprocessableEntity)
	if a.problem.Extensions["ledger_error"] != books.ErrNoOriginal.Error() {
		t.Fatalf("reversal of no row: %+v, want %q", a.problem, books.ErrNoOriginal)
	}
	if n := b.rows(t); n != 2 {
		t.Fatalf("%d rows, want the entry and its one reversal", n)
	}
}

func testMalformed(t *testing.T, b *bundle) {
	b.post(t, "", entryJSON("INV-1", 1, 1000, ""), 1).want(t, http.StatusBadRequest)
	b.post(t, "k1", `{"run_id":"run-1","amount":5}`, 1).want(t, http.StatusBadRequest)
	a := b.post(t, "k2", strings.Replace(entryJSON("INV-1", 1, 1000, ""), `"run_id":"run-1"`, `"run_id":"run-2"`, 1), 1).want(t, http.StatusUnprocessableEntity)
	if a.problem.Extensions["ledger_error"] != books.ErrInvalid.Error() {
		t.Fatalf("entry of another run: %+v", a.problem)
	}
	b.post(t, "k3", `{"key":"other",`+entryJSON("INV-1", 1, 1000, "")[1:], 1).want(t, http.StatusUnprocessableEntity)
	if b.rows(t) != 0 {
		t.Fatal("a malformed entry was written")
	}
}

// A newer holder raises the ledger's fence while a stale request is between the service's
// fence check and its write: the write is refused in its transaction with 503, which
// releases the key, so the newer holder's request under the same key is written, and the
// stale one's retry is a 409. Answered 409 there, the refusal would be stored under the
// key and replayed to the newer holder.
func testFenceDuringWrite(t *testing.T, b0 *bundle) {
	var (
		once sync.Once
		db   *books.DB
	)
	b := setupHooks(t, b0.keys, "sqlite:"+filepath.Join(t.TempDir(), "race.db"), ledgerapi.Hooks{BeforeWrite: func(context.Context) {
		once.Do(func() {
			if err := db.Ledger(false).RaiseFence(context.Background(), fence.Token{RunID: run, Epoch: ledgerapi.DefaultEpoch, Value: 4}); err != nil {
				t.Error(err)
			}
		})
	}})
	db = b.db
	a := b.post(t, "k1", entryJSON("INV-1", 1, 1000, ""), 3).want(t, http.StatusServiceUnavailable)
	if a.problem.Type != httpidem.TypeFenced || a.problem.Extensions["highest"] != float64(4) || a.header.Get("Retry-After") == "" {
		t.Fatalf("problem %+v, want a fenced 503 with Retry-After naming the token 4", a.problem)
	}
	b.post(t, "k1", entryJSON("INV-1", 1, 1000, ""), 3).want(t, http.StatusConflict)
	if a := b.post(t, "k1", entryJSON("INV-1", 1, 1000, ""), 4).want(t, http.StatusCreated); a.replayed {
		t.Fatal("the newer holder got a replay")
	}
	if n := b.rows(t); n != 1 {
		t.Fatalf("%d rows, want the newer holder's one", n)
	}
}
