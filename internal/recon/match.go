package recon

import "fmt"

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

// MatchLines pairs invoice line n with line n of the purchase order named by the
// invoice's PO Ref; the pair must agree on SKU and supplier. The results follow the
// order of invs and their lines.
func MatchLines(invs []Invoice, pos []PurchaseOrderLine) ([]Match, []Unmatched) {
	byKey := make(map[poKey]PurchaseOrderLine, len(pos))
	for _, p := range pos {
		byKey[poKey{p.PO, p.Line}] = p
	}
	matches := make([]Match, 0, lineCount(invs))
	unmatched := []Unmatched{}
	for _, inv := range invs {
		for _, l := range inv.Lines {
			p, ok := byKey[poKey{inv.PORef, l.No}]
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
	}
	return matches, unmatched
}
