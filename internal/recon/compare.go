package recon

import (
	"cmp"
	"fmt"
	"slices"
)

// Adjustment kinds.
const (
	KindPrice = "price" // billed unit price above the purchase order's
	KindQty   = "qty"   // billed quantity above the quantity received
)

// Adjustment is one mismatch: a ledger amount owed by the supplier and the stock change
// that brings the booked stock back to what was received at the purchase-order price.
type Adjustment struct {
	InvoiceNo       string `json:"invoice_no"`
	Line            int    `json:"line"`
	Kind            string `json:"kind"`
	SupplierID      string `json:"supplier_id"`
	SKU             string `json:"sku"`
	AmountPaise     int64  `json:"amount_paise"`
	QtyDelta        int64  `json:"qty_delta"`
	ValueDeltaPaise int64  `json:"value_delta_paise"`
}

// KeySuffix is "<invoice_no>:<line>:<kind>"; the ledger key is "<run_id>:" + KeySuffix
// and the stock key "<run_id>:stock:" + KeySuffix.
func (a Adjustment) KeySuffix() string {
	return fmt.Sprintf("%s:%d:%s", a.InvoiceNo, a.Line, a.Kind)
}

// Compare sets every match against what was received on its purchase-order line (no
// receipt, or one for another SKU, counts as nothing received) and returns the
// adjustments sorted by KeySuffix:
//
//	price: amount = (billed unit − PO unit) × billed qty, qty delta 0, value delta −amount
//	qty:   amount = (billed qty − received qty) × PO unit, qty delta −(billed − received), value delta −amount
//
// A line over on both counts gets both; together they claim exactly
// billed unit × billed qty − PO unit × received qty.
func Compare(matches []Match, received []Receipt) []Adjustment {
	c := NewComparer(received)
	for _, m := range matches {
		c.Add(m)
	}
	return c.Adjustments()
}

// Comparer sets matches against the receipts one at a time (see Compare), so that a big
// night's matches need not be held at once.
type Comparer struct {
	received lineIndex[Receipt]
	adjs     []Adjustment
}

// NewComparer indexes the receipts.
func NewComparer(received []Receipt) *Comparer {
	return &Comparer{received: newLineIndex(received, func(r Receipt) poKey { return poKey{r.PO, r.Line} }), adjs: []Adjustment{}}
}

// Add sets one match against what was received on its purchase-order line.
func (c *Comparer) Add(m Match) {
	recv := int64(0)
	if r, ok := c.received.find(poKey{m.PO, m.POLine}); ok && r.SKU == m.SKU {
		recv = r.Qty
	}
	base := Adjustment{InvoiceNo: m.InvoiceNo, Line: m.Line, SupplierID: m.SupplierID, SKU: m.SKU}
	if m.BilledUnitPaise > m.POUnitPaise {
		a := base
		a.Kind = KindPrice
		a.AmountPaise = (m.BilledUnitPaise - m.POUnitPaise) * m.BilledQty
		a.ValueDeltaPaise = -a.AmountPaise
		c.adjs = append(c.adjs, a)
	}
	if m.BilledQty > recv {
		a := base
		a.Kind = KindQty
		a.AmountPaise = (m.BilledQty - recv) * m.POUnitPaise
		a.QtyDelta = -(m.BilledQty - recv)
		a.ValueDeltaPaise = -a.AmountPaise
		c.adjs = append(c.adjs, a)
	}
}

// Adjustments returns the adjustments of the matches added so far, sorted by KeySuffix.
func (c *Comparer) Adjustments() []Adjustment {
	sortAdjustments(c.adjs)
	return c.adjs
}

func sortAdjustments(adjs []Adjustment) {
	slices.SortFunc(adjs, func(a, b Adjustment) int { return cmp.Compare(a.KeySuffix(), b.KeySuffix()) })
}

// DebitNote is one supplier's claim: the total of its adjustments and the lines behind it.
type DebitNote struct {
	SupplierID string       `json:"supplier_id"`
	TotalPaise int64        `json:"total_paise"`
	Lines      []Adjustment `json:"lines"`
}

// DebitNotes groups adjs by supplier, sorted by supplier id, each note's lines sorted
// by KeySuffix. Only suppliers whose adjustments add up to more than zero get a note.
func DebitNotes(adjs []Adjustment) []DebitNote {
	sorted := slices.Clone(adjs)
	slices.SortFunc(sorted, func(a, b Adjustment) int {
		return cmp.Or(cmp.Compare(a.SupplierID, b.SupplierID), cmp.Compare(a.KeySuffix(), b.KeySuffix()))
	})
	notes := []DebitNote{}
	for start := 0; start < len(sorted); {
		end := start + 1
		for end < len(sorted) && sorted[end].SupplierID == sorted[start].SupplierID {
			end++
		}
		n := DebitNote{SupplierID: sorted[start].SupplierID, Lines: sorted[start:end:end]}
		for _, a := range n.Lines {
			n.TotalPaise += a.AmountPaise
		}
		if n.TotalPaise > 0 {
			notes = append(notes, n)
		}
		start = end
	}
	return notes
}

// StockLevel is a warehouse's stock of one SKU.
type StockLevel struct {
	SKU        string `json:"sku"`
	Qty        int64  `json:"qty"`
	ValuePaise int64  `json:"value_paise"`
}

// ApplyAdjustments returns levels with the adjustments' deltas added, sorted by SKU; a
// SKU that has no level yet starts from zero.
func ApplyAdjustments(levels []StockLevel, adjs []Adjustment) []StockLevel {
	bySKU := make(map[string]StockLevel, len(levels))
	for _, l := range levels {
		bySKU[l.SKU] = l
	}
	for _, a := range adjs {
		l := bySKU[a.SKU]
		l.SKU = a.SKU
		l.Qty += a.QtyDelta
		l.ValuePaise += a.ValueDeltaPaise
		bySKU[a.SKU] = l
	}
	out := make([]StockLevel, 0, len(bySKU))
	for _, l := range bySKU {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b StockLevel) int { return cmp.Compare(a.SKU, b.SKU) })
	return out
}
