package recon

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// The document format, as an emailed or scanned invoice reads after text extraction:
//
//	TAX INVOICE
//	Invoice No: INV-20261013-0001
//	Supplier: Sharma Steel Works [SUP-07]
//	Bill To: Ludhiana Warehouse [ldh]
//	Date: 13/10/2026
//	PO Ref: PO-88120
//	1. BOLT-M8-50  Hex bolt M8x50   200 pcs @ 12.50 = 2,500.00
//	2. NUT-M8      Hex nut M8       200 pcs @ 3.25 = 650.00
//	Total: 3,150.00
const docDateLayout = "02/01/2006"

var (
	lineItemRE  = regexp.MustCompile(`^(\d+)\.\s+(\S+)\s+(.+?)\s+(\d+)\s+pcs\s+@\s+(\S+)\s+=\s+(\S+)$`)
	lineStartRE = regexp.MustCompile(`^\d+\.\s`)
	labelledRE  = regexp.MustCompile(`^(.*?)\s*\[([^\[\]]*)\]$`)
)

// renderInvoice writes inv in the document format. billTo is the warehouse's name.
func renderInvoice(inv Invoice, billTo string) []byte {
	var b bytes.Buffer
	date, _ := time.Parse(dateLayout, inv.Date)
	fmt.Fprintf(&b, "TAX INVOICE\nInvoice No: %s\nSupplier: %s [%s]\nBill To: %s [%s]\nDate: %s\nPO Ref: %s\n",
		inv.InvoiceNo, inv.SupplierName, inv.SupplierID, billTo, inv.Warehouse, date.Format(docDateLayout), inv.PORef)
	skuW, descW := 0, 0
	for _, l := range inv.Lines {
		skuW, descW = max(skuW, len(l.SKU)), max(descW, len(l.Desc))
	}
	for _, l := range inv.Lines {
		fmt.Fprintf(&b, "%d. %-*s%-*s%d pcs @ %s = %s\n",
			l.No, skuW+2, l.SKU, descW+3, l.Desc, l.Qty, FormatPaise(l.UnitPaise), FormatPaise(l.AmountPaise))
	}
	fmt.Fprintf(&b, "Total: %s\n", FormatPaise(inv.TotalPaise))
	return b.Bytes()
}

// parseInvoiceText reads a document. The line items are looked for first, so a garbled
// document is reported as "no line items found" whatever else it lacks.
func parseInvoiceText(invoiceNo string, doc []byte) (Invoice, error) {
	var (
		inv    Invoice
		fields = map[string]string{}
	)
	for raw := range strings.Lines(string(doc)) {
		s := strings.TrimSpace(raw)
		if lineStartRE.MatchString(s) {
			l, err := parseLineItem(invoiceNo, s, len(inv.Lines)+1)
			if err != nil {
				return Invoice{}, err
			}
			inv.Lines = append(inv.Lines, l)
			continue
		}
		if label, value, ok := strings.Cut(s, ":"); ok {
			label = strings.ToLower(strings.TrimSpace(label))
			if _, dup := fields[label]; !dup {
				fields[label] = strings.TrimSpace(value)
			}
		}
	}
	if len(inv.Lines) == 0 {
		return Invoice{}, unreadable(invoiceNo, "no line items found")
	}
	get := func(label string) (string, error) {
		v, ok := fields[label]
		if !ok || v == "" {
			return "", unreadable(invoiceNo, "no %q line found", label)
		}
		return v, nil
	}
	var err error
	if inv.InvoiceNo, err = get("invoice no"); err != nil {
		return Invoice{}, err
	}
	if inv.InvoiceNo != invoiceNo {
		return Invoice{}, unreadable(invoiceNo, "document names invoice %q", inv.InvoiceNo)
	}
	supplier, err := get("supplier")
	if err != nil {
		return Invoice{}, err
	}
	if inv.SupplierName, inv.SupplierID, err = parseLabelled(invoiceNo, "supplier", supplier); err != nil {
		return Invoice{}, err
	}
	billTo, err := get("bill to")
	if err != nil {
		return Invoice{}, err
	}
	if _, inv.Warehouse, err = parseLabelled(invoiceNo, "bill to", billTo); err != nil {
		return Invoice{}, err
	}
	date, err := get("date")
	if err != nil {
		return Invoice{}, err
	}
	t, perr := time.Parse(docDateLayout, date)
	if perr != nil {
		return Invoice{}, unreadable(invoiceNo, "date %q is not dd/mm/yyyy", date)
	}
	inv.Date = t.Format(dateLayout)
	if inv.PORef, err = get("po ref"); err != nil {
		return Invoice{}, err
	}
	total, err := get("total")
	if err != nil {
		return Invoice{}, err
	}
	if inv.TotalPaise, perr = ParsePaise(total); perr != nil {
		return Invoice{}, unreadable(invoiceNo, "total %q is not an amount", total)
	}
	if err := inv.check(); err != nil {
		return Invoice{}, err
	}
	return inv, nil
}

func parseLineItem(invoiceNo, s string, want int) (Line, error) {
	m := lineItemRE.FindStringSubmatch(s)
	if m == nil {
		return Line{}, unreadable(invoiceNo, "cannot read line item %q", s)
	}
	var l Line
	if _, err := fmt.Sscan(m[1], &l.No); err != nil || l.No != want {
		return Line{}, unreadable(invoiceNo, "line item %q is out of order (want %d)", s, want)
	}
	l.SKU, l.Desc = m[2], m[3]
	if _, err := fmt.Sscan(m[4], &l.Qty); err != nil {
		return Line{}, unreadable(invoiceNo, "line %d: quantity %q is not a number", want, m[4])
	}
	var err error
	if l.UnitPaise, err = ParsePaise(m[5]); err != nil {
		return Line{}, unreadable(invoiceNo, "line %d: unit price %q is not an amount", want, m[5])
	}
	if l.AmountPaise, err = ParsePaise(m[6]); err != nil {
		return Line{}, unreadable(invoiceNo, "line %d: amount %q is not an amount", want, m[6])
	}
	return l, nil
}

// parseLabelled reads "Name [ID]".
func parseLabelled(invoiceNo, what, s string) (name, id string, err error) {
	m := labelledRE.FindStringSubmatch(s)
	if m == nil || !validID(m[2]) {
		return "", "", unreadable(invoiceNo, "%s %q does not end with a valid [id]", what, s)
	}
	return m[1], m[2], nil
}
