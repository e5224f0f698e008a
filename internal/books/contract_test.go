package books

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/cairnhq/cairn/pkg/fence"
	"github.com/cairnhq/cairn/pkg/idempotency"
)

func TestLedgerContract(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		testLedgerContract(t, b.open)
	})
}

// testLedgerContract is what every implementation of the ledger and the stock
// store must do. open returns a fresh, empty database for each case.
func testLedgerContract(t *testing.T, open func(t *testing.T) *DB) {
	tests := []struct {
		name string
		run  func(t *testing.T, db *DB)
	}{
		{"post inserts", contractPostInserts},
		{"post of an existing key with the same payload is a no-op", contractPostRepeat},
		{"post of an existing key with another payload conflicts", contractPostConflict},
		{"reversal points to its original", contractReversal},
		{"reversal of a missing key fails", contractReversalOfMissing},
		{"stale token writes nothing", contractStaleToken},
		{"foreign epoch writes nothing", contractForeignEpoch},
		{"token of another run is refused", contractOtherRun},
		{"list is ordered by key", contractListOrder},
		{"tokens and amounts beyond 32 bits", contractWide},
		{"shadow tables are apart", contractShadow},
		{"apply changes the level once", contractApply},
		{"apply of an existing key with another payload conflicts", contractApplyConflict},
		{"apply without a level row fails", contractApplyNoLevel},
		{"stale apply changes nothing", contractApplyStale},
		{"stock reversal restores the level", contractStockReversal},
		{"levels", contractLevels},
		{"copy levels to the shadow", contractCopyLevels},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.run(t, open(t))
		})
	}
}

func mustPost(t *testing.T, l *Ledger, tok fence.Token, e Entry) bool {
	t.Helper()
	inserted, err := l.Post(t.Context(), tok, e)
	if err != nil {
		t.Fatalf("Post(%s): %v", e.Key, err)
	}
	return inserted
}

func mustGet(t *testing.T, l *Ledger, key string) Entry {
	t.Helper()
	e, ok, err := l.Get(t.Context(), key)
	if err != nil || !ok {
		t.Fatalf("Get(%s) = %v, %v", key, ok, err)
	}
	return e
}

func contractPostInserts(t *testing.T, db *DB) {
	l := db.Ledger(false)
	e := entry("INV-0117", 3, "price", 12000)
	if !mustPost(t, l, token(5), e) {
		t.Fatal("first Post reported no insert")
	}
	if got := mustGet(t, l, e.Key); got != e {
		t.Fatalf("Get = %+v, want %+v", got, e)
	}
	if _, ok, err := l.Get(t.Context(), "nope"); ok || err != nil {
		t.Fatalf("Get of a missing key = %v, %v", ok, err)
	}
}

func contractPostRepeat(t *testing.T, db *DB) {
	l := db.Ledger(false)
	e := entry("INV-0117", 3, "price", 12000)
	mustPost(t, l, token(5), e)
	again := e
	again.CreatedAt = "2026-10-13T23:59:59Z" // a retry, later, after a restart
	if mustPost(t, l, token(9), again) {
		t.Fatal("repeat Post reported an insert")
	}
	if n := countRows(t, db, "ledger_entries"); n != 1 {
		t.Fatalf("%d rows after the repeat, want 1", n)
	}
	if got := mustGet(t, l, e.Key); got.CreatedAt != e.CreatedAt {
		t.Fatalf("created_at = %s after the repeat, want the first %s", got.CreatedAt, e.CreatedAt)
	}
}

func contractPostConflict(t *testing.T, db *DB) {
	l := db.Ledger(false)
	e := entry("INV-0117", 3, "price", 12000)
	mustPost(t, l, token(5), e)
	other := e
	other.AmountPaise = 13500
	inserted, err := l.Post(t.Context(), token(5), other)
	if !errors.Is(err, ErrConflict) || inserted {
		t.Fatalf("Post of another amount = %v, %v; want ErrConflict", inserted, err)
	}
	for _, want := range []string{e.Key, "amount_paise=12000", "amount_paise=13500",
		idempotency.Digest([]byte(e.payload().String())), idempotency.Digest([]byte(other.payload().String()))} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("conflict error %q does not name %q", err, want)
		}
	}
	var c *idempotency.ConflictError
	if !errors.As(err, &c) || c.Key != e.Key || c.Stored == c.New {
		t.Errorf("conflict %+v does not name the key and two digests", c)
	}
	if got := mustGet(t, l, e.Key); got != e {
		t.Fatalf("stored entry changed to %+v", got)
	}
}

func contractReversal(t *testing.T, db *DB) {
	l := db.Ledger(false)
	e := entry("INV-0117", 3, "price", 12000)
	mustPost(t, l, token(5), e)
	rev := reversal(e)
	if !mustPost(t, l, token(6), rev) {
		t.Fatal("reversal not inserted")
	}
	if got := mustGet(t, l, rev.Key); got.Reverses != e.Key || got.AmountPaise != -12000 {
		t.Fatalf("reversal = %+v", got)
	}
	if mustPost(t, l, token(6), rev) {
		t.Fatal("repeated reversal inserted again")
	}
	entries, err := l.ListRun(t.Context(), run)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, e := range entries {
		sum += e.AmountPaise
	}
	if len(entries) != 2 || sum != 0 {
		t.Fatalf("run has %d entries summing to %d, want 2 summing to 0", len(entries), sum)
	}
}

func contractReversalOfMissing(t *testing.T, db *DB) {
	l := db.Ledger(false)
	rev := reversal(entry("INV-0117", 3, "price", 12000))
	if _, err := l.Post(t.Context(), token(5), rev); !errors.Is(err, ErrNoOriginal) {
		t.Fatalf("reversal of a missing key = %v, want ErrNoOriginal", err)
	}
	if n := countRows(t, db, "ledger_entries"); n != 0 {
		t.Fatalf("%d rows after a refused reversal", n)
	}
}

func contractStaleToken(t *testing.T, db *DB) {
	l := db.Ledger(false)
	if err := l.RaiseFence(t.Context(), token(5)); err != nil {
		t.Fatal(err)
	}
	mustPost(t, l, token(5), entry("INV-1", 1, "price", 100))
	// A newer holder takes the lease and raises the fence.
	if err := l.RaiseFence(t.Context(), token(8)); err != nil {
		t.Fatal(err)
	}
	if err := l.RaiseFence(t.Context(), token(5)); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("RaiseFence with the old token = %v, want ErrFenced", err)
	}
	stale := entry("INV-1", 2, "price", 200)
	if inserted, err := l.Post(t.Context(), token(5), stale); !errors.Is(err, fence.ErrFenced) || inserted {
		t.Fatalf("stale Post = %v, %v; want ErrFenced", inserted, err)
	}
	// Even a repeat of a key that exists is refused to the stale holder.
	if _, err := l.Post(t.Context(), token(5), entry("INV-1", 1, "price", 100)); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("stale repeat = %v, want ErrFenced", err)
	}
	if _, ok, _ := l.Get(t.Context(), stale.Key); ok {
		t.Fatal("the stale entry was written")
	}
	mustPost(t, l, token(8), stale)
	if n := countRows(t, db, "ledger_entries"); n != 2 {
		t.Fatalf("%d rows, want 2", n)
	}
}

func contractForeignEpoch(t *testing.T, db *DB) {
	l := db.Ledger(false)
	if err := l.RaiseFence(t.Context(), token(5)); err != nil {
		t.Fatal(err)
	}
	foreign := fence.Token{RunID: run, Epoch: "0ther", Value: 900}
	if err := l.RaiseFence(t.Context(), foreign); !errors.Is(err, fence.ErrForeignEpoch) {
		t.Fatalf("RaiseFence under another epoch = %v, want ErrForeignEpoch", err)
	}
	if _, err := l.Post(t.Context(), foreign, entry("INV-1", 1, "price", 100)); !errors.Is(err, fence.ErrForeignEpoch) {
		t.Fatalf("Post under another epoch = %v, want ErrForeignEpoch", err)
	}
	if n := countRows(t, db, "ledger_entries"); n != 0 {
		t.Fatalf("%d rows after a foreign-epoch Post", n)
	}
}

func contractOtherRun(t *testing.T, db *DB) {
	other := fence.Token{RunID: "run-other", Epoch: epoch, Value: 5}
	if _, err := db.Ledger(false).Post(t.Context(), other, entry("INV-1", 1, "price", 100)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Post under another run's token = %v, want ErrInvalid", err)
	}
	bad := entry("INV-1", 1, "price", 100)
	bad.CreatedAt = "yesterday"
	if _, err := db.Ledger(false).Post(t.Context(), token(5), bad); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Post with created_at %q = %v, want ErrInvalid", bad.CreatedAt, err)
	}
}

func contractListOrder(t *testing.T, db *DB) {
	l := db.Ledger(false)
	var want []string
	for _, line := range []int{3, 1, 2} {
		e := entry("INV-1", line, "qty", int64(line))
		mustPost(t, l, token(1), e)
		want = append(want, e.Key)
	}
	// Byte order, whatever the database's collation: a linguistic one puts INV-a
	// before INV-B.
	for _, invoice := range []string{"INV-b", "INV-B", "INV-a"} {
		e := entry(invoice, 1, "qty", 1)
		mustPost(t, l, token(1), e)
		want = append(want, e.Key)
	}
	slices.Sort(want)
	// Another run's rows are not listed.
	o := entry("INV-1", 1, "qty", 1)
	o.RunID, o.Key = "run-other", "run-other:INV-1:1:qty"
	mustPost(t, l, fence.Token{RunID: "run-other", Epoch: epoch, Value: 1}, o)

	entries, err := l.ListRun(t.Context(), run)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Key)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("ListRun keys = %v, want %v", got, want)
	}
}

// Tokens are stream revisions and amounts are paise: both outgrow 32 bits.
func contractWide(t *testing.T, db *DB) {
	l := db.Ledger(false)
	high := token(1<<40 + 3)
	if err := l.RaiseFence(t.Context(), high); err != nil {
		t.Fatal(err)
	}
	e := entry("INV-1", 1, "price", 1<<40+7)
	mustPost(t, l, high, e)
	if got := mustGet(t, l, e.Key); got != e {
		t.Fatalf("Get = %+v, want %+v", got, e)
	}
	if _, err := l.Post(t.Context(), token(1<<40+2), entry("INV-1", 2, "price", 1)); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("Post under a lower 41-bit token = %v, want ErrFenced", err)
	}
	top := token(math.MaxInt64)
	if err := l.RaiseFence(t.Context(), top); err != nil {
		t.Fatalf("RaiseFence to the largest token: %v", err)
	}
	if _, err := l.Post(t.Context(), high, entry("INV-1", 3, "price", 1)); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("Post under %d after the fence rose to %d = %v, want ErrFenced", high.Value, top.Value, err)
	}

	s := db.Stock(false)
	setLevel(t, db, "stock_levels", "ldh", "NUT-M8", 1<<33, 1<<41)
	mustApply(t, s, top, adjustment("INV-1", 1, "price", 1<<32, 1<<40)) // the ledger's fences are the stock's here
	if got, want := level(t, s, "ldh", "NUT-M8"), (Level{1<<33 + 1<<32, 1<<41 + 1<<40}); got != want {
		t.Fatalf("level = %+v, want %+v", got, want)
	}
}

func contractShadow(t *testing.T, db *DB) {
	live, shadow := db.Ledger(false), db.Ledger(true)
	if err := live.RaiseFence(t.Context(), token(50)); err != nil {
		t.Fatal(err)
	}
	// The shadow's fence is its own: a lower token is no stale one there.
	e := entry("INV-1", 1, "price", 100)
	if !mustPost(t, shadow, token(7), e) {
		t.Fatal("shadow Post reported no insert")
	}
	if _, ok, _ := live.Get(t.Context(), e.Key); ok {
		t.Fatal("the shadow entry is in the real ledger")
	}
	if n := countRows(t, db, "shadow_ledger_entries"); n != 1 {
		t.Fatalf("%d shadow rows, want 1", n)
	}
	// The same key in the real ledger is a separate row.
	other := e
	other.AmountPaise = 999
	if !mustPost(t, live, token(50), other) {
		t.Fatal("real Post reported no insert")
	}
	if got := mustGet(t, shadow, e.Key); got.AmountPaise != 100 {
		t.Fatalf("shadow entry changed to %+v", got)
	}
}
