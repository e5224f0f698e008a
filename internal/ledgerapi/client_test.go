package ledgerapi_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/cairnhq/cairn/internal/books"
	"github.com/cairnhq/cairn/internal/ledgerapi"
	"github.com/cairnhq/cairn/pkg/fence"
	"github.com/cairnhq/cairn/pkg/idempotency"
	"github.com/cairnhq/cairn/pkg/retry"
)

// The client is the ledger over HTTP with the ledger database's answers: post-ledger and
// the compensator cannot tell the two books apart, on SQLite and on PostgreSQL.
func TestClient(t *testing.T) {
	k := newKeys(t)
	for _, db := range databases {
		t.Run(db.name, func(t *testing.T) {
			for _, tc := range []struct {
				name string
				fn   func(t *testing.T, c *clientBundle)
			}{
				{"post, get and list", testClientPost},
				{"shadow is its own ledger", testClientShadow},
				{"fences", testClientFences},
				{"foreign epoch", testClientForeignEpoch},
				{"refusals are the ledger's errors", testClientRefusals},
				{"reversal", testClientReversal},
				{"lost answer", testClientLostAnswer},
			} {
				t.Run(tc.name, func(t *testing.T) { tc.fn(t, setupClient(t, k, db.dsn(t))) })
			}
		})
	}
	t.Run("server down", func(t *testing.T) { testClientServerDown(t, k) })
}

type clientBundle struct {
	db     *books.DB
	client *ledgerapi.Client
	drop   atomic.Int64 // POSTs whose answer is dropped after the write landed
}

func setupClient(t *testing.T, k *keys, dsn string) *clientBundle {
	t.Helper()
	db, err := books.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := ledgerapi.CreateTables(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	h, err := ledgerapi.Handler(ledgerapi.Config{DB: db, Ring: k.ring})
	if err != nil {
		t.Fatal(err)
	}
	b := &clientBundle{db: db}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || b.drop.Add(-1) < 0 {
			b.drop.Store(0)
			h.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(httptest.NewRecorder(), r) // the write lands, its answer is lost
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(srv.Close)
	if b.client, err = ledgerapi.NewClient(ledgerapi.ClientConfig{URL: srv.URL, Signer: k.signers[ledgerapi.CallerPostLedger]}); err != nil {
		t.Fatal(err)
	}
	return b
}

const epoch = "epoch-1"

func tok(v uint64) fence.Token { return fence.Token{RunID: run, Epoch: epoch, Value: v} }

func clientEntries() []books.Entry {
	var out []books.Entry
	for i, amount := range []int64{125000, 9900, 430000} {
		out = append(out, books.Entry{Key: run + ":INV-1:" + string(rune('1'+i)), RunID: run, InvoiceNo: "INV-1", Line: 1 + i,
			Kind: "payable", SupplierID: "SUP-1", AmountPaise: amount})
	}
	return out
}

// same compares entries without created_at, which the server stamps.
func same(a, b books.Entry) bool {
	a.CreatedAt, b.CreatedAt = "", ""
	return a == b
}

func testClientPost(t *testing.T, c *clientBundle) {
	ctx := t.Context()
	l := c.client.Ledger(false)
	if err := l.RaiseFence(ctx, tok(3)); err != nil {
		t.Fatal(err)
	}
	want := clientEntries()
	for _, e := range want {
		ins, rc, err := l.PostReceipt(ctx, tok(3), e)
		if err != nil || !ins {
			t.Fatalf("post %s: inserted %v, %v", e.Key, ins, err)
		}
		if rc.Status != http.StatusCreated || rc.Reference != "/v1/entries/"+e.Key || rc.AnswerDigest == "" || rc.Replayed {
			t.Errorf("receipt of %s: %+v", e.Key, rc)
		}
	}
	// A repeat is a no-op, as on the database.
	if ins, err := l.Post(ctx, tok(3), want[0]); err != nil || ins {
		t.Fatalf("repeat: inserted %v, %v; want a no-op", ins, err)
	}
	got, found, err := l.Get(ctx, want[1].Key)
	if err != nil || !found || !same(got, want[1]) || got.CreatedAt == "" {
		t.Fatalf("get: %+v %v %v, want %+v stamped by the server", got, found, err, want[1])
	}
	if _, found, err := l.Get(ctx, run+":INV-9:1"); err != nil || found {
		t.Fatalf("get of a key never written: found %v, %v", found, err)
	}
	list, err := l.ListRun(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	db, err := c.db.Ledger(false).ListRun(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(list, db) || len(list) != len(want) {
		t.Fatalf("ListRun over HTTP %+v, the table holds %+v", list, db)
	}
	if other, err := l.ListRun(ctx, "run-2"); err != nil || len(other) != 0 {
		t.Fatalf("ListRun of another run: %+v, %v", other, err)
	}
}

func testClientShadow(t *testing.T, c *clientBundle) {
	ctx := t.Context()
	live, shadow := c.client.Ledger(false), c.client.Ledger(true)
	e := clientEntries()[0]
	if _, err := live.Post(ctx, tok(1), e); err != nil {
		t.Fatal(err)
	}
	other := e
	other.AmountPaise++ // the shadow's key is its own: another payload is not a conflict
	if ins, err := shadow.Post(ctx, tok(1), other); err != nil || !ins {
		t.Fatalf("shadow post: inserted %v, %v", ins, err)
	}
	for _, x := range []struct {
		shadow bool
		want   int64
	}{{false, e.AmountPaise}, {true, other.AmountPaise}} {
		got, found, err := c.db.Ledger(x.shadow).Get(ctx, e.Key)
		if err != nil || !found || got.AmountPaise != x.want {
			t.Errorf("shadow %v holds %+v (%v, %v), want %d paise", x.shadow, got, found, err, x.want)
		}
	}
	if n, err := shadow.ListRun(ctx, run); err != nil || len(n) != 1 || n[0].AmountPaise != other.AmountPaise {
		t.Fatalf("shadow ListRun: %+v, %v", n, err)
	}
}

func testClientFences(t *testing.T, c *clientBundle) {
	ctx := t.Context()
	l := c.client.Ledger(false)
	if err := l.RaiseFence(ctx, tok(5)); err != nil {
		t.Fatal(err)
	}
	// Raising again to the same token, as a takeover's retry does, is fine.
	if err := l.RaiseFence(ctx, tok(5)); err != nil {
		t.Fatal(err)
	}
	if err := l.RaiseFence(ctx, tok(4)); !errors.Is(err, fence.ErrFenced) || retry.IsTemporary(err) {
		t.Fatalf("raising to an older token: %v, want fence.ErrFenced", err)
	}
	e := clientEntries()[0]
	if _, err := l.Post(ctx, tok(4), e); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("a zombie's post: %v, want fence.ErrFenced", err)
	}
	if _, found, _ := c.db.Ledger(false).Get(ctx, e.Key); found {
		t.Fatal("a fenced post wrote its row")
	}
	if _, err := l.Post(ctx, tok(6), e); err != nil {
		t.Fatalf("a newer token's post: %v", err)
	}
}

func testClientForeignEpoch(t *testing.T, c *clientBundle) {
	ctx := t.Context()
	l := c.client.Ledger(false)
	if err := l.RaiseFence(ctx, tok(2)); err != nil {
		t.Fatal(err)
	}
	foreign := fence.Token{RunID: run, Epoch: "epoch-2", Value: 9}
	if err := l.RaiseFence(ctx, foreign); !errors.Is(err, fence.ErrForeignEpoch) {
		t.Fatalf("raise under a foreign epoch: %v, want fence.ErrForeignEpoch", err)
	}
	if _, err := l.Post(ctx, foreign, clientEntries()[0]); !errors.Is(err, fence.ErrForeignEpoch) || retry.IsTemporary(err) {
		t.Fatalf("post under a foreign epoch: %v, want fence.ErrForeignEpoch, not temporary", err)
	}
}

func testClientRefusals(t *testing.T, c *clientBundle) {
	ctx := t.Context()
	l := c.client.Ledger(false)
	es := clientEntries()
	if _, err := l.Post(ctx, tok(1), es[0]); err != nil {
		t.Fatal(err)
	}
	changed := es[0]
	changed.AmountPaise = 1
	if _, err := l.Post(ctx, tok(1), changed); !errors.Is(err, idempotency.ErrConflict) {
		t.Fatalf("a changed payload under a key: %v, want idempotency.ErrConflict", err)
	}
	rev, err := books.ReversalOf(es[0], "")
	if err != nil {
		t.Fatal(err)
	}
	wrong := rev
	wrong.AmountPaise = -7
	if _, err := l.Post(ctx, tok(1), wrong); !errors.Is(err, books.ErrNotNegation) {
		t.Fatalf("a reversal of another amount: %v, want books.ErrNotNegation", err)
	}
	orphan := rev
	orphan.Key, orphan.Reverses = run+":INV-9:1:rev", run+":INV-9:1"
	if _, err := l.Post(ctx, tok(1), orphan); !errors.Is(err, books.ErrNoOriginal) {
		t.Fatalf("a reversal of no row: %v, want books.ErrNoOriginal", err)
	}
	if n := rowsOf(t, c.db); n != 1 {
		t.Fatalf("%d rows after the refusals, want 1", n)
	}
}

func testClientReversal(t *testing.T, c *clientBundle) {
	ctx := t.Context()
	l := c.client.Ledger(false)
	e := clientEntries()[1]
	if _, err := l.Post(ctx, tok(1), e); err != nil {
		t.Fatal(err)
	}
	rev, err := l.Reversal(ctx, e.Key, "2026-12-02T01:00:00Z")
	if err != nil {
		t.Fatal(err)
	}
	if rev.Key != e.Key+":rev" || rev.Reverses != e.Key || rev.AmountPaise != -e.AmountPaise {
		t.Fatalf("reversal %+v of %+v", rev, e)
	}
	if ins, err := l.Post(ctx, tok(1), rev); err != nil || !ins {
		t.Fatalf("posting the reversal: %v, %v", ins, err)
	}
	if _, err := l.Reversal(ctx, rev.Key, ""); !errors.Is(err, books.ErrNotNegation) {
		t.Fatalf("reversal of a reversal: %v, want books.ErrNotNegation", err)
	}
	if _, err := l.Reversal(ctx, run+":INV-9:1", ""); !errors.Is(err, books.ErrNoOriginal) {
		t.Fatalf("reversal of no row: %v, want books.ErrNoOriginal", err)
	}
}

// An answer lost after the write landed is settled by the same request again, which the
// server answers from its store: one row, the receipt marked replayed.
func testClientLostAnswer(t *testing.T, c *clientBundle) {
	ctx := t.Context()
	l := c.client.Ledger(false)
	c.drop.Store(1)
	e := clientEntries()[2]
	_, rc, err := l.PostReceipt(ctx, tok(1), e)
	if err != nil {
		t.Fatal(err)
	}
	if !rc.Replayed || rc.Status != http.StatusCreated {
		t.Fatalf("receipt %+v, want the stored 201 replayed", rc)
	}
	if n := rowsOf(t, c.db); n != 1 {
		t.Fatalf("%d rows, want the one write", n)
	}
}

// A ledger that does not answer is temporary, for every call: the runner retries.
func testClientServerDown(t *testing.T, k *keys) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c, err := ledgerapi.NewClient(ledgerapi.ClientConfig{URL: url, Outage: -1, Signer: k.signers[ledgerapi.CallerPostLedger]})
	if err != nil {
		t.Fatal(err)
	}
	l := c.Ledger(false)
	ctx := t.Context()
	_, postErr := l.Post(ctx, tok(1), clientEntries()[0])
	_, _, getErr := l.Get(ctx, "k")
	_, listErr := l.ListRun(ctx, run)
	for name, err := range map[string]error{"raise": l.RaiseFence(ctx, tok(1)), "post": postErr, "get": getErr, "list": listErr} {
		if !retry.IsTemporary(err) {
			t.Errorf("%s with the ledger down: %v, want temporary", name, err)
		}
	}
}

func rowsOf(t *testing.T, db *books.DB) int {
	t.Helper()
	var n int
	if err := db.SQL().QueryRowContext(t.Context(), `SELECT count(*) FROM ledger_entries`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestNewClientRefusesABadURL(t *testing.T) {
	for _, u := range []string{"", "ledger:8080", "ftp://h:1", "http://"} {
		if _, err := ledgerapi.NewClient(ledgerapi.ClientConfig{URL: u}); err == nil {
			t.Errorf("URL %q taken", u)
		}
	}
}
