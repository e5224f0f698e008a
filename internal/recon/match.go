package recon

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// PurchaseOrderLine is one line of a purchase order in the ERP.
type PurchaseOrderLine struct {
	PO         string `json:"po"`
	Line       int    `json:"line"`
	SKU        string `json:"sku"`
	Qty        int64  `json:"qty"`
	UnitPaise  int64  `json:"unit_paise"`
	SupplierID string `json:"supplier_id"`
}

// Receipt is what reached the warehouse against one purchase-order line.
type Receipt struct {
	PO   string `json:"po"`
	Line int    `json:"line"`
	SKU  string `json:"sku"`
	Qty  int64  `json:"qty"`
}

// Match pairs an invoice line with its purchase-order line. MatchLines does not know
// the receipts and leaves ReceivedQty zero; Compare takes the received quantities from
// its receipts argument, never from this field.
type Match struct {
	InvoiceNo       string `json:"invoice_no"`
	Line            int    `json:"line"`
	SupplierID      string `json:"supplier_id"`
	SKU             string `json:"sku"`
	PO              string `json:"po"`
	POLine          int    `json:"po_line"`
	BilledQty       int64  `json:"billed_qty"`
	BilledUnitPaise int64  `json:"billed_unit_paise"`
	POUnitPaise     int64  `json:"po_unit_paise"`
	ReceivedQty     int64  `json:"received_qty"`
}

// Unmatched is an invoice line with no purchase-order line to set it against.
type Unmatched struct {
	InvoiceNo string `json:"invoice_no"`
	Line      int    `json:"line"`
	Reason    string `json:"reason"`
}

type poKey struct {
	po   string
	line int
}

// lineIndex finds items by purchase order and line in a list sorted so (the ERP's reads
// return them so; another list is sorted in a copy), without a map: a big night has
// hundreds of thousands of lines, and a map of them costs more than the lines.
type lineIndex[T any] struct {
	items []T
	key   func(T) poKey
}

func newLineIndex[T any](items []T, key func(T) poKey) lineIndex[T] {
	byKey := func(a, b T) int { return comparePOKeys(key(a), key(b)) }
	if !slices.IsSortedFunc(items, byKey) {
		items = slices.Clone(items)
		slices.SortStableFunc(items, byKey)
	}
	return lineIndex[T]{items: items, key: key}
}

// find returns the last item under k, as a map filled in order would hold.
func (x lineIndex[T]) find(k poKey) (T, bool) {
	i, ok := slices.BinarySearchFunc(x.items, k, func(t T, k poKey) int { return comparePOKeys(x.key(t), k) })
	if !ok {
		var none T
		return none, false
	}
	for i+1 < len(x.items) && x.key(x.items[i+1]) == k {
		i++
	}
	return x.items[i], true
}

func comparePOKeys(a, b poKey) int {
	return cmp.Or(strings.Compare(a.po, b.po), cmp.Compare(a.line, b.line))
}

// MatchLines pairs invoice line n with line n of the purchase order named by the
// invoice's PO Ref; the pair must agree on SKU and supplier. The results follow the
// order of invs and their lines.
func MatchLines(invs []Invoice, pos []PurchaseOrderLine) ([]Match, []Unmatched) {
	m := NewMatcher(pos)
	matches := make([]Match, 0, lineCount(invs))
	unmatched := []Unmatched{}
	for _, inv := range invs {
		matches, unmatched = m.Lines(inv, matches, unmatched)
	}
	return matches, unmatched
}

// Matcher pairs invoice lines with purchase-order lines one invoice at a time, so that a
// big night's invoices need not be held at once.
type Matcher struct {
	pos lineIndex[PurchaseOrderLine]
}

// NewMatcher indexes the purchase-order lines.
func NewMatcher(pos []PurchaseOrderLine) *Matcher {
	return &Matcher{pos: newLineIndex(pos, func(p PurchaseOrderLine) poKey { return poKey{p.PO, p.Line} })}
}

// Lines appends inv's matched lines to matches and the others to unmatched, in line order
// (see MatchLines).
func (m *Matcher) Lines(inv Invoice, matches []Match, unmatched []Unmatched) ([]Match, []Unmatched) {
	for _, l := range inv.Lines {
		p, ok := m.pos.find(poKey{inv.PORef, l.No})
		reason := ""
		switch {
		case !ok:
			reason = fmt.Sprintf("no line %d on purchase order %s", l.No, inv.PORef)
		case p.SKU != l.SKU:
			reason = fmt.Sprintf("billed sku %s, purchase order %s line %d is for %s", l.SKU, p.PO, p.Line, p.SKU)
		case p.SupplierID != inv.SupplierID:
			reason = fmt.Sprintf("billed by %s, purchase order %s is with %s", inv.SupplierID, p.PO, p.SupplierID)
		}
		if reason != "" {
			unmatched = append(unmatched, Unmatched{InvoiceNo: inv.InvoiceNo, Line: l.No, Reason: reason})
			continue
		}
		matches = append(matches, Match{
			InvoiceNo: inv.InvoiceNo, Line: l.No, SupplierID: inv.SupplierID, SKU: l.SKU,
			PO: p.PO, POLine: p.Line, BilledQty: l.Qty, BilledUnitPaise: l.UnitPaise, POUnitPaise: p.UnitPaise,
		})
	}
	return matches, unmatched
}
