package recon

import (
	"math"
	"slices"
)

// Invoice is one supplier invoice as read from its document.
type Invoice struct {
	InvoiceNo    string `json:"invoice_no"`
	SupplierID   string `json:"supplier_id"`
	SupplierName string `json:"supplier_name"`
	Warehouse    string `json:"warehouse"`
	Date         string `json:"date"` // 2006-01-02
	PORef        string `json:"po_ref"`
	Lines        []Line `json:"lines"`
	TotalPaise   int64  `json:"total_paise"`
}

// Line is one billed line of an invoice; No counts from 1 in document order.
type Line struct {
	No          int    `json:"no"`
	SKU         string `json:"sku"`
	Desc        string `json:"desc"`
	Qty         int64  `json:"qty"`
	UnitPaise   int64  `json:"unit_paise"`
	AmountPaise int64  `json:"amount_paise"`
}

// check validates an invoice against the line-item schema and returns the first
// violation as an *UnreadableError.
func (inv Invoice) check() error {
	no := inv.InvoiceNo
	if !validID(no) {
		return unreadable("", "invoice number %q is not a valid id", no)
	}
	if !validID(inv.SupplierID) {
		return unreadable(no, "supplier id %q is not a valid id", inv.SupplierID)
	}
	if !validID(inv.Warehouse) {
		return unreadable(no, "warehouse %q is not a valid id", inv.Warehouse)
	}
	if !validID(inv.PORef) {
		return unreadable(no, "purchase order %q is not a valid id", inv.PORef)
	}
	if checkDate("date", inv.Date) != nil {
		return unreadable(no, "date %q is not a date written yyyy-mm-dd", inv.Date)
	}
	if len(inv.Lines) == 0 {
		return unreadable(no, "no line items found")
	}
	var total int64
	for i, l := range inv.Lines {
		if l.No != i+1 {
			return unreadable(no, "line %d is numbered %d", i+1, l.No)
		}
		if !validID(l.SKU) {
			return unreadable(no, "line %d: sku %q is not a valid id", l.No, l.SKU)
		}
		if l.Qty <= 0 {
			return unreadable(no, "line %d: quantity %d is not positive", l.No, l.Qty)
		}
		if l.UnitPaise < 0 {
			return unreadable(no, "line %d: unit price %s is negative", l.No, FormatPaise(l.UnitPaise))
		}
		if l.UnitPaise != 0 && l.Qty > math.MaxInt64/l.UnitPaise {
			return unreadable(no, "line %d: amount too large", l.No)
		}
		if want := l.Qty * l.UnitPaise; l.AmountPaise != want {
			return unreadable(no, "line %d: amount %s is not %d × %s = %s",
				l.No, FormatPaise(l.AmountPaise), l.Qty, FormatPaise(l.UnitPaise), FormatPaise(want))
		}
		if total > math.MaxInt64-l.AmountPaise {
			return unreadable(no, "total too large")
		}
		total += l.AmountPaise
	}
	if inv.TotalPaise != total {
		return unreadable(no, "total %s is not the sum of the lines %s", FormatPaise(inv.TotalPaise), FormatPaise(total))
	}
	return nil
}

// lineCount is the number of lines over all invoices.
func lineCount(invs []Invoice) int {
	n := 0
	for _, inv := range invs {
		n += len(inv.Lines)
	}
	return n
}

// PurchaseOrderRefs returns the distinct PO references of invs, sorted: what
// LoadPurchaseOrders needs.
func PurchaseOrderRefs(invs []Invoice) []string {
	return distinctSorted(len(invs), func(yield func(string)) {
		for _, inv := range invs {
			yield(inv.PORef)
		}
	})
}

// SKUs returns the distinct SKUs billed in invs, sorted: what LoadStockLevels needs.
func SKUs(invs []Invoice) []string {
	return distinctSorted(lineCount(invs), func(yield func(string)) {
		for _, inv := range invs {
			for _, l := range inv.Lines {
				yield(l.SKU)
			}
		}
	})
}

func distinctSorted(hint int, each func(yield func(string))) []string {
	seen := make(map[string]struct{}, hint)
	out := make([]string, 0, hint)
	each(func(s string) {
		if _, ok := seen[s]; !ok {
			seen[s] = struct{}{}
			out = append(out, s)
		}
	})
	slices.Sort(out)
	return out
}
