package books

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/cairnhq/cairn/pkg/fence"
	"github.com/cairnhq/cairn/pkg/idempotency"
)

// The stock store's cases of testLedgerContract.

func setLevel(t *testing.T, db *DB, table, warehouse, sku string, qty, value int64) {
	t.Helper()
	_, err := db.SQL().ExecContext(t.Context(), db.q(`INSERT INTO `+table+`(warehouse, sku, qty, value_paise) VALUES (?, ?, ?, ?)`),
		warehouse, sku, qty, value)
	if err != nil {
		t.Fatalf("setting %s %s/%s: %v", table, warehouse, sku, err)
	}
}

func level(t *testing.T, s *Stock, warehouse, sku string) Level {
	t.Helper()
	levels, err := s.Levels(t.Context(), warehouse, []string{sku})
	if err != nil {
		t.Fatal(err)
	}
	l, ok := levels[sku]
	if !ok {
		t.Fatalf("no level for %s/%s", warehouse, sku)
	}
	return l
}

func adjustment(invoice string, line int, kind string, qty, value int64) Adjustment {
	return Adjustment{
		Key:             fmt.Sprintf("%s:stock:%s:%d:%s", run, invoice, line, kind),
		RunID:           run,
		Warehouse:       "ldh",
		SKU:             "NUT-M8",
		SupplierID:      "SUP-7",
		QtyDelta:        qty,
		ValueDeltaPaise: value,
		Reason:          kind + " mismatch",
		CreatedAt:       at,
	}
}

func mustApply(t *testing.T, s *Stock, tok fence.Token, a Adjustment) bool {
	t.Helper()
	inserted, err := s.Apply(t.Context(), tok, a)
	if err != nil {
		t.Fatalf("Apply(%s): %v", a.Key, err)
	}
	return inserted
}

func contractApply(t *testing.T, db *DB) {
	s := db.Stock(false)
	setLevel(t, db, "stock_levels", "ldh", "NUT-M8", 1200, 390000)
	a := adjustment("INV-1", 1, "price", 0, -12000)
	if !mustApply(t, s, token(3), a) {
		t.Fatal("first Apply reported no insert")
	}
	if got := level(t, s, "ldh", "NUT-M8"); got != (Level{1200, 378000}) {
		t.Fatalf("level after Apply = %+v", got)
	}
	again := a
	again.CreatedAt = "2026-10-14T01:00:00Z"
	if mustApply(t, s, token(4), again) {
		t.Fatal("repeat Apply reported an insert")
	}
	if got := level(t, s, "ldh", "NUT-M8"); got != (Level{1200, 378000}) {
		t.Fatalf("level after the repeat = %+v, want it unchanged", got)
	}
	got, ok, err := s.Get(t.Context(), a.Key)
	if err != nil || !ok || got != a {
		t.Fatalf("Get = %+v, %v, %v; want %+v", got, ok, err, a)
	}
	adjs, err := s.ListRun(t.Context(), run)
	if err != nil || len(adjs) != 1 {
		t.Fatalf("ListRun = %d adjustments, %v; want 1", len(adjs), err)
	}
}

func contractApplyConflict(t *testing.T, db *DB) {
	s := db.Stock(false)
	setLevel(t, db, "stock_levels", "ldh", "NUT-M8", 1200, 390000)
	a := adjustment("INV-1", 1, "qty", -10, -3250)
	mustApply(t, s, token(3), a)
	other := a
	other.QtyDelta = -12
	inserted, err := s.Apply(t.Context(), token(3), other)
	if !errors.Is(err, ErrConflict) || inserted {
		t.Fatalf("Apply of another qty = %v, %v; want ErrConflict", inserted, err)
	}
	for _, want := range []string{a.Key, "qty_delta=-10", "qty_delta=-12",
		idempotency.Digest([]byte(a.payload().String())), idempotency.Digest([]byte(other.payload().String()))} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("conflict error %q does not name %q", err, want)
		}
	}
	if got := level(t, s, "ldh", "NUT-M8"); got != (Level{1190, 386750}) {
		t.Fatalf("level = %+v after a conflict, want the first adjustment only", got)
	}
}

func contractApplyNoLevel(t *testing.T, db *DB) {
	s := db.Stock(false)
	a := adjustment("INV-1", 1, "qty", -10, -3250)
	inserted, err := s.Apply(t.Context(), token(3), a)
	if !errors.Is(err, ErrNoStockLevel) || inserted {
		t.Fatalf("Apply without a level = %v, %v; want ErrNoStockLevel", inserted, err)
	}
	if !strings.Contains(err.Error(), `"ldh"`) || !strings.Contains(err.Error(), `"NUT-M8"`) {
		t.Errorf("error %q does not name the warehouse and sku", err)
	}
	if n := countRows(t, db, "stock_adjustments"); n != 0 {
		t.Fatalf("%d adjustments written without a level", n)
	}
}

func contractApplyStale(t *testing.T, db *DB) {
	s := db.Stock(false)
	setLevel(t, db, "stock_levels", "ldh", "NUT-M8", 1200, 390000)
	if err := s.RaiseFence(t.Context(), token(9)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(t.Context(), token(3), adjustment("INV-1", 1, "qty", -10, -3250)); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("stale Apply = %v, want ErrFenced", err)
	}
	if n := countRows(t, db, "stock_adjustments"); n != 0 {
		t.Fatalf("%d adjustments written by a stale holder", n)
	}
	if got := level(t, s, "ldh", "NUT-M8"); got != (Level{1200, 390000}) {
		t.Fatalf("level = %+v after a stale Apply", got)
	}
}

func contractStockReversal(t *testing.T, db *DB) {
	s := db.Stock(false)
	setLevel(t, db, "stock_levels", "ldh", "NUT-M8", 1200, 390000)
	a := adjustment("INV-1", 1, "qty", -10, -3250)
	mustApply(t, s, token(3), a)
	rev := a
	rev.Key, rev.Reverses, rev.QtyDelta, rev.ValueDeltaPaise, rev.Reason = a.Key+":rev", a.Key, 10, 3250, "undo"
	mustApply(t, s, token(4), rev)
	if got := level(t, s, "ldh", "NUT-M8"); got != (Level{1200, 390000}) {
		t.Fatalf("level after the reversal = %+v, want the original", got)
	}
	missing := rev
	missing.Key, missing.Reverses = "x:rev", "x"
	if _, err := s.Apply(t.Context(), token(4), missing); !errors.Is(err, ErrNoOriginal) {
		t.Fatalf("reversal of a missing key = %v, want ErrNoOriginal", err)
	}
}

func contractLevels(t *testing.T, db *DB) {
	s := db.Stock(false)
	setLevel(t, db, "stock_levels", "ldh", "A", 1, 10)
	setLevel(t, db, "stock_levels", "ldh", "B", 2, 20)
	setLevel(t, db, "stock_levels", "amr", "A", 3, 30)
	got, err := s.Levels(t.Context(), "ldh", []string{"A", "missing"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got["A"] != (Level{1, 10}) {
		t.Fatalf("Levels(ldh, A, missing) = %v", got)
	}
	all, err := s.Levels(t.Context(), "ldh", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all["B"] != (Level{2, 20}) {
		t.Fatalf("Levels(ldh, all) = %v", all)
	}
	// More skus than one IN list holds.
	many := make([]string, 0, 2*skuChunk+1)
	for range 2 * skuChunk {
		many = append(many, "none")
	}
	many = append(many, "B")
	got, err = s.Levels(t.Context(), "ldh", many)
	if err != nil || len(got) != 1 || got["B"] != (Level{2, 20}) {
		t.Fatalf("Levels over %d skus = %v, %v", len(many), got, err)
	}
}

func contractCopyLevels(t *testing.T, db *DB) {
	live, shadow := db.Stock(false), db.Stock(true)
	setLevel(t, db, "stock_levels", "ldh", "NUT-M8", 1200, 390000)
	setLevel(t, db, "stock_levels", "ldh", "BOLT-M8", 500, 100000)
	setLevel(t, db, "stock_levels", "amr", "NUT-M8", 7, 70)
	if err := shadow.CopyLevelsToShadow(t.Context(), "ldh", []string{"NUT-M8"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := shadow.Levels(t.Context(), "ldh", nil); len(got) != 1 || got["NUT-M8"] != (Level{1200, 390000}) {
		t.Fatalf("shadow levels after copying NUT-M8 = %v", got)
	}
	// A shadow adjustment moves the shadow level only.
	mustApply(t, shadow, token(2), adjustment("INV-1", 1, "price", 0, -12000))
	if got := level(t, live, "ldh", "NUT-M8"); got != (Level{1200, 390000}) {
		t.Fatalf("real level moved to %+v by a shadow adjustment", got)
	}
	// A repeated copy keeps what the shadow holds and adds what is missing.
	if err := live.CopyLevelsToShadow(t.Context(), "ldh", nil); err != nil {
		t.Fatal(err)
	}
	got, err := shadow.Levels(t.Context(), "ldh", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Level{"NUT-M8": {1200, 378000}, "BOLT-M8": {500, 100000}}
	if !maps.Equal(got, want) {
		t.Fatalf("shadow levels = %v, want %v", got, want)
	}
	if n := countRows(t, db, "shadow_stock_levels"); n != 2 {
		t.Fatalf("%d shadow level rows, want 2 (amr not copied)", n)
	}
}
