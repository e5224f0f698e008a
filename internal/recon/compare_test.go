package recon

import (
	"reflect"
	"slices"
	"testing"
)

func TestMatchLines(t *testing.T) {
	t.Parallel()
	inv := exampleInvoice()
	other := exampleInvoice()
	other.InvoiceNo, other.PORef = "INV-20261013-0002", "PO-88121"
	pos := []PurchaseOrderLine{
		{PO: "PO-88120", Line: 1, SKU: "BOLT-M8-50", Qty: 200, UnitPaise: 1200, SupplierID: "SUP-07"},
		{PO: "PO-88120", Line: 2, SKU: "NUT-M8", Qty: 200, UnitPaise: 325, SupplierID: "SUP-07"},
		{PO: "PO-88121", Line: 1, SKU: "NUT-M8", Qty: 200, UnitPaise: 325, SupplierID: "SUP-07"},
	}
	matches, unmatched := MatchLines([]Invoice{inv, other}, pos)
	want := []Match{
		{InvoiceNo: "INV-20261013-0001", Line: 1, SupplierID: "SUP-07", SKU: "BOLT-M8-50", PO: "PO-88120", POLine: 1, BilledQty: 200, BilledUnitPaise: 1250, POUnitPaise: 1200},
		{InvoiceNo: "INV-20261013-0001", Line: 2, SupplierID: "SUP-07", SKU: "NUT-M8", PO: "PO-88120", POLine: 2, BilledQty: 200, BilledUnitPaise: 325, POUnitPaise: 325},
	}
	if !slices.Equal(matches, want) {
		t.Fatalf("matches = %+v\nwant %+v", matches, want)
	}
	wantUn := []Unmatched{
		{InvoiceNo: "INV-20261013-0002", Line: 1, Reason: "billed sku BOLT-M8-50, purchase order PO-88121 line 1 is for NUT-M8"},
		{InvoiceNo: "INV-20261013-0002", Line: 2, Reason: "no line 2 on purchase order PO-88121"},
	}
	if !slices.Equal(unmatched, wantUn) {
		t.Fatalf("unmatched = %+v\nwant %+v", unmatched, wantUn)
	}

	pos[0].SupplierID = "SUP-08"
	_, unmatched = MatchLines([]Invoice{inv}, pos)
	if len(unmatched) != 1 || unmatched[0].Reason != "billed by SUP-07, purchase order PO-88120 is with SUP-08" {
		t.Fatalf("supplier mismatch: %+v", unmatched)
	}
}

func TestCompare(t *testing.T) {
	t.Parallel()
	m := func(inv string, line int, billedQty, billedUnit, poUnit int64) Match {
		return Match{InvoiceNo: inv, Line: line, SupplierID: "SUP-07", SKU: "NUT-M8", PO: "PO-1", POLine: line,
			BilledQty: billedQty, BilledUnitPaise: billedUnit, POUnitPaise: poUnit}
	}
	r := func(line int, qty int64) Receipt { return Receipt{PO: "PO-1", Line: line, SKU: "NUT-M8", Qty: qty} }
	tests := []struct {
		name     string
		matches  []Match
		received []Receipt
		want     []Adjustment
	}{
		{"clean", []Match{m("INV-1", 1, 200, 325, 325)}, []Receipt{r(1, 200)}, nil},
		{"price", []Match{m("INV-1", 1, 200, 385, 325)}, []Receipt{r(1, 200)}, []Adjustment{
			{InvoiceNo: "INV-1", Line: 1, Kind: "price", SupplierID: "SUP-07", SKU: "NUT-M8", AmountPaise: 12000, ValueDeltaPaise: -12000},
		}},
		{"qty", []Match{m("INV-1", 1, 200, 325, 325)}, []Receipt{r(1, 180)}, []Adjustment{
			{InvoiceNo: "INV-1", Line: 1, Kind: "qty", SupplierID: "SUP-07", SKU: "NUT-M8", AmountPaise: 6500, QtyDelta: -20, ValueDeltaPaise: -6500},
		}},
		{"both", []Match{m("INV-1", 1, 200, 385, 325)}, []Receipt{r(1, 180)}, []Adjustment{
			{InvoiceNo: "INV-1", Line: 1, Kind: "price", SupplierID: "SUP-07", SKU: "NUT-M8", AmountPaise: 12000, ValueDeltaPaise: -12000},
			{InvoiceNo: "INV-1", Line: 1, Kind: "qty", SupplierID: "SUP-07", SKU: "NUT-M8", AmountPaise: 6500, QtyDelta: -20, ValueDeltaPaise: -6500},
		}},
		{"under-billed is no claim", []Match{m("INV-1", 1, 150, 300, 325)}, []Receipt{r(1, 200)}, nil},
		{"nothing received", []Match{m("INV-1", 1, 10, 325, 325)}, nil, []Adjustment{
			{InvoiceNo: "INV-1", Line: 1, Kind: "qty", SupplierID: "SUP-07", SKU: "NUT-M8", AmountPaise: 3250, QtyDelta: -10, ValueDeltaPaise: -3250},
		}},
		{"receipt of another sku", []Match{m("INV-1", 1, 10, 325, 325)}, []Receipt{{PO: "PO-1", Line: 1, SKU: "BOLT-M8-50", Qty: 10}}, []Adjustment{
			{InvoiceNo: "INV-1", Line: 1, Kind: "qty", SupplierID: "SUP-07", SKU: "NUT-M8", AmountPaise: 3250, QtyDelta: -10, ValueDeltaPaise: -3250},
		}},
		{"sorted by key suffix", []Match{m("INV-2", 1, 10, 330, 325), m("INV-1", 2, 10, 330, 325)}, []Receipt{r(1, 10), r(2, 10)}, []Adjustment{
			{InvoiceNo: "INV-1", Line: 2, Kind: "price", SupplierID: "SUP-07", SKU: "NUT-M8", AmountPaise: 50, ValueDeltaPaise: -50},
			{InvoiceNo: "INV-2", Line: 1, Kind: "price", SupplierID: "SUP-07", SKU: "NUT-M8", AmountPaise: 50, ValueDeltaPaise: -50},
		}},
	}
	for _, tt := range tests {
		if got := Compare(tt.matches, tt.received); !slices.Equal(got, tt.want) {
			t.Errorf("%s: got %+v\nwant %+v", tt.name, got, tt.want)
		}
	}
}

func TestKeySuffix(t *testing.T) {
	t.Parallel()
	a := Adjustment{InvoiceNo: "INV-20261013-0007", Line: 2, Kind: KindPrice}
	if got := a.KeySuffix(); got != "INV-20261013-0007:2:price" {
		t.Fatalf("KeySuffix = %q", got)
	}
}

func TestDebitNotes(t *testing.T) {
	t.Parallel()
	adj := func(sup, inv string, line int, amount int64) Adjustment {
		return Adjustment{InvoiceNo: inv, Line: line, Kind: KindPrice, SupplierID: sup, SKU: "X", AmountPaise: amount, ValueDeltaPaise: -amount}
	}
	adjs := []Adjustment{
		adj("SUP-09", "INV-3", 1, 500),
		adj("SUP-07", "INV-2", 1, 100),
		adj("SUP-07", "INV-1", 2, 250),
		adj("SUP-08", "INV-4", 1, 0),
	}
	got := DebitNotes(adjs)
	want := []DebitNote{
		{SupplierID: "SUP-07", TotalPaise: 350, Lines: []Adjustment{adj("SUP-07", "INV-1", 2, 250), adj("SUP-07", "INV-2", 1, 100)}},
		{SupplierID: "SUP-09", TotalPaise: 500, Lines: []Adjustment{adj("SUP-09", "INV-3", 1, 500)}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if adjs[0].SupplierID != "SUP-09" {
		t.Fatal("DebitNotes reordered its input")
	}
	if got := DebitNotes(nil); len(got) != 0 {
		t.Fatalf("no adjustments gave %+v", got)
	}
}

func TestApplyAdjustments(t *testing.T) {
	t.Parallel()
	levels := []StockLevel{{SKU: "NUT-M8", Qty: 1200, ValuePaise: 390000}, {SKU: "BOLT-M8-50", Qty: 10, ValuePaise: 12500}}
	adjs := []Adjustment{
		{SKU: "NUT-M8", ValueDeltaPaise: -12000},
		{SKU: "NUT-M8", QtyDelta: -20, ValueDeltaPaise: -6500},
		{SKU: "WASHER-M8", QtyDelta: -1, ValueDeltaPaise: -60},
	}
	got := ApplyAdjustments(levels, adjs)
	want := []StockLevel{
		{SKU: "BOLT-M8-50", Qty: 10, ValuePaise: 12500},
		{SKU: "NUT-M8", Qty: 1180, ValuePaise: 371500},
		{SKU: "WASHER-M8", Qty: -1, ValuePaise: -60},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if levels[0].Qty != 1200 {
		t.Fatal("ApplyAdjustments changed its input")
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	invs := []Invoice{exampleInvoice(), exampleInvoice()}
	adjs := []Adjustment{{AmountPaise: 12000}, {AmountPaise: 6500}}
	parked := []Parked{{InvoiceNo: "INV-9", Reason: "no line items found"}, {InvoiceNo: "INV-3", Reason: "no line items found"}}
	got := Summarize(invs, adjs, parked)
	want := Report{Invoices: 2, Lines: 4, Adjustments: 2, TotalPaise: 18500, Parked: []Parked{parked[1], parked[0]}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if empty := Summarize(nil, nil, nil); empty.Parked == nil {
		t.Fatal("an empty report's Parked must be [] (it is marshalled)")
	}
}

func TestRefsAndSKUs(t *testing.T) {
	t.Parallel()
	a, b := exampleInvoice(), exampleInvoice()
	b.PORef = "PO-00001"
	b.Lines = b.Lines[1:]
	if got := PurchaseOrderRefs([]Invoice{a, b, a}); !slices.Equal(got, []string{"PO-00001", "PO-88120"}) {
		t.Fatalf("PurchaseOrderRefs = %v", got)
	}
	if got := SKUs([]Invoice{a, b}); !slices.Equal(got, []string{"BOLT-M8-50", "NUT-M8"}) {
		t.Fatalf("SKUs = %v", got)
	}
}

// TestLinesFoundInAnyOrder: purchase-order lines and receipts are found by PO and line in
// whatever order they come, and of two under one key the later counts (as a map would).
func TestLinesFoundInAnyOrder(t *testing.T) {
	pos := []PurchaseOrderLine{
		{PO: "PO-2", Line: 1, SKU: "B", Qty: 5, UnitPaise: 100, SupplierID: "SUP-01"},
		{PO: "PO-1", Line: 1, SKU: "A", Qty: 5, UnitPaise: 100, SupplierID: "SUP-01"},
		{PO: "PO-1", Line: 1, SKU: "A", Qty: 5, UnitPaise: 90, SupplierID: "SUP-01"},
	}
	invs := []Invoice{
		{InvoiceNo: "INV-1", SupplierID: "SUP-01", PORef: "PO-1", Lines: []Line{{No: 1, SKU: "A", Qty: 5, UnitPaise: 100}}},
		{InvoiceNo: "INV-2", SupplierID: "SUP-01", PORef: "PO-2", Lines: []Line{{No: 1, SKU: "B", Qty: 5, UnitPaise: 100}, {No: 2, SKU: "C", Qty: 1, UnitPaise: 1}}},
	}
	ms, un := MatchLines(invs, pos)
	if len(ms) != 2 || ms[0].POUnitPaise != 90 || ms[1].PO != "PO-2" || len(un) != 1 || un[0].InvoiceNo != "INV-2" {
		t.Fatalf("MatchLines = %+v, %+v", ms, un)
	}
	received := []Receipt{{PO: "PO-2", Line: 1, SKU: "B", Qty: 5}, {PO: "PO-1", Line: 1, SKU: "A", Qty: 5}, {PO: "PO-1", Line: 1, SKU: "A", Qty: 4}}
	adjs := Compare(ms, received)
	if len(adjs) != 2 || adjs[0].Kind != KindPrice || adjs[0].AmountPaise != 50 || adjs[1].Kind != KindQty || adjs[1].QtyDelta != -1 {
		t.Fatalf("Compare = %+v", adjs)
	}
}
