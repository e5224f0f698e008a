package recon

import (
	"fmt"
	"strings"
)

// CheckAnswer ties an extractor's answer to its document: its invoice number must be the
// document's (the name the inbox gives it, and the "Invoice No:" line of the text when it
// has one), and its supplier id the bracketed code of the text's "Supplier:" line when it
// has one. Anything else is an *UnreadableError, Invalid, matching ErrNotTheDocument: the
// answer is about another document (a mixed-up or misbehaving model), and rows filed from
// it would be filed under the wrong invoice or supplier.
func CheckAnswer(inv Invoice, d Document, doc []byte) error {
	no, supplier := documentHeader(doc)
	switch {
	case inv.InvoiceNo != d.InvoiceNo:
		return notTheDocument(d.InvoiceNo, "the answer is about invoice %q, the document is %s", inv.InvoiceNo, d.InvoiceNo)
	case no != "" && inv.InvoiceNo != no:
		return notTheDocument(d.InvoiceNo, "the answer is about invoice %q, the document's text says %q", inv.InvoiceNo, no)
	case supplier != "" && inv.SupplierID != supplier:
		return notTheDocument(d.InvoiceNo, "the answer names supplier %q, the document's text says %q", inv.SupplierID, supplier)
	}
	return nil
}

func notTheDocument(invoiceNo, format string, args ...any) error {
	return &UnreadableError{InvoiceNo: invoiceNo, Reason: fmt.Sprintf(format, args...), Invalid: true, err: ErrNotTheDocument}
}

// documentHeader reads the invoice number and the supplier id a document's text states
// (text.go's format), "" for what it does not state; only the lines before the first line
// item are read.
func documentHeader(doc []byte) (invoiceNo, supplierID string) {
	for raw := range strings.Lines(string(doc)) {
		s := strings.TrimSpace(raw)
		if lineStartRE.MatchString(s) {
			break
		}
		label, value, ok := strings.Cut(s, ":")
		if !ok {
			continue
		}
		value = strings.TrimSpace(value)
		switch strings.ToLower(strings.TrimSpace(label)) {
		case "invoice no":
			if invoiceNo == "" {
				invoiceNo = value
			}
		case "supplier":
			if m := labelledRE.FindStringSubmatch(value); m != nil && supplierID == "" {
				supplierID = strings.TrimSpace(m[2])
			}
		}
	}
	return invoiceNo, supplierID
}
