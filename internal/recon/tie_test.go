package recon

import (
	"errors"
	"testing"
)

func TestCheckAnswerTiesTheAnswerToItsDocument(t *testing.T) {
	doc := []byte("TAX INVOICE\nInvoice No: INV-1\nSupplier: Sharma Steel Works [SUP-07]\nBill To: Ludhiana [ldh]\n" +
		"1. BOLT  Bolt  2 pcs @ 1.00 = 2.00\nSupplier: Other [SUP-99]\n")
	d := Document{InvoiceNo: "INV-1"}
	for _, tc := range []struct {
		name     string
		inv      Invoice
		doc      []byte
		mismatch bool
	}{
		{"its own", Invoice{InvoiceNo: "INV-1", SupplierID: "SUP-07"}, doc, false},
		{"another invoice number", Invoice{InvoiceNo: "INV-2", SupplierID: "SUP-07"}, doc, true},
		{"another supplier", Invoice{InvoiceNo: "INV-1", SupplierID: "SUP-99"}, doc, true},
		{"a text that names another invoice", Invoice{InvoiceNo: "INV-1", SupplierID: "SUP-07"}, []byte("Invoice No: INV-3\n"), true},
		{"a text that states neither", Invoice{InvoiceNo: "INV-1", SupplierID: "SUP-42"}, []byte("scanned, illegible\n"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckAnswer(tc.inv, d, tc.doc)
			if !tc.mismatch {
				if err != nil {
					t.Fatalf("CheckAnswer: %v, want nil", err)
				}
				return
			}
			var u *UnreadableError
			if !errors.Is(err, ErrNotTheDocument) || !errors.Is(err, ErrUnreadable) || !errors.As(err, &u) || !u.Invalid || u.InvoiceNo != "INV-1" {
				t.Fatalf("CheckAnswer: %#v, want an Invalid *UnreadableError of INV-1 matching ErrNotTheDocument", err)
			}
		})
	}
}

// An answer that is not line-item JSON is Invalid (not memoised); a document the rules
// cannot read is not.
func TestParseAnswerFailuresAreInvalid(t *testing.T) {
	var u *UnreadableError
	if _, err := ParseAnswer([]byte("I think these are bolts")); !errors.As(err, &u) || !u.Invalid {
		t.Fatalf("ParseAnswer of prose: %#v, want an Invalid *UnreadableError", err)
	}
	if _, err := (RuleExtractor{}).Extract(t.Context(), "INV-1", []byte("garbled")); !errors.As(err, &u) || u.Invalid {
		t.Fatalf("the rules on a garbled document: %#v, want an *UnreadableError, not Invalid", err)
	}
}
