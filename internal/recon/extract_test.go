package recon

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// workloadExample is the document of WORKLOAD.md, word for word.
const workloadExample = `TAX INVOICE
Invoice No: INV-20261013-0001
Supplier: Sharma Steel Works [SUP-07]
Bill To: Ludhiana Warehouse [ldh]
Date: 13/10/2026
PO Ref: PO-88120
1. BOLT-M8-50  Hex bolt M8x50   200 pcs @ 12.50 = 2,500.00
2. NUT-M8      Hex nut M8       200 pcs @ 3.25 = 650.00
Total: 3,150.00
`

func exampleInvoice() Invoice {
	return Invoice{
		InvoiceNo: "INV-20261013-0001", SupplierID: "SUP-07", SupplierName: "Sharma Steel Works",
		Warehouse: "ldh", Date: "2026-10-13", PORef: "PO-88120",
		Lines: []Line{
			{No: 1, SKU: "BOLT-M8-50", Desc: "Hex bolt M8x50", Qty: 200, UnitPaise: 1250, AmountPaise: 250000},
			{No: 2, SKU: "NUT-M8", Desc: "Hex nut M8", Qty: 200, UnitPaise: 325, AmountPaise: 65000},
		},
		TotalPaise: 315000,
	}
}

func TestRuleExtractorReadsTheWorkloadExample(t *testing.T) {
	t.Parallel()
	var ex RuleExtractor
	answer, err := ex.Extract(t.Context(), "INV-20261013-0001", []byte(workloadExample))
	if err != nil {
		t.Fatal(err)
	}
	inv, err := ParseAnswer(answer)
	if err != nil {
		t.Fatal(err)
	}
	if want := exampleInvoice(); !reflect.DeepEqual(inv, want) {
		t.Fatalf("got %+v\nwant %+v", inv, want)
	}
	again, err := ex.Extract(t.Context(), "INV-20261013-0001", []byte(strings.ReplaceAll(workloadExample, "\n", "\r\n")))
	if err != nil || string(again) != string(answer) {
		t.Fatalf("CRLF document gave %s, %v; want the same answer %s", again, err, answer)
	}
	if got := ex.Versions(); got != (ExtractorVersions{Prompt: "lines-v1", Schema: "line-items-v1", Model: "rules-1"}) {
		t.Fatalf("versions = %+v", got)
	}
}

func TestRenderedInvoiceReadsBack(t *testing.T) {
	t.Parallel()
	want := exampleInvoice()
	doc := renderInvoice(want, "Ludhiana Warehouse")
	if string(doc) != workloadExample {
		t.Fatalf("rendered:\n%s\nwant:\n%s", doc, workloadExample)
	}
}

func TestRuleExtractorParksWhatItCannotRead(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, doc, reason string
	}{
		{"garbled", "xP\"^dIGNCbT MXD>Rj#z\nYLKzA&Nsiz&kW_Qn><kt(i\n", "no line items found"},
		{"empty", "", "no line items found"},
		{"no invoice number", strings.Replace(workloadExample, "Invoice No: INV-20261013-0001\n", "", 1), `no "invoice no" line found`},
		{"other invoice", strings.Replace(workloadExample, "-0001\n", "-0002\n", 1), `document names invoice "INV-20261013-0002"`},
		{"no supplier id", strings.Replace(workloadExample, " [SUP-07]", "", 1), "supplier"},
		{"bad date", strings.Replace(workloadExample, "13/10/2026", "31/02/2026", 1), "date"},
		{"no po", strings.Replace(workloadExample, "PO Ref: PO-88120\n", "", 1), `no "po ref" line found`},
		{"wrong amount", strings.Replace(workloadExample, "= 650.00", "= 651.00", 1), "line 2: amount 651.00 is not 200 × 3.25 = 650.00"},
		{"wrong total", strings.Replace(workloadExample, "Total: 3,150.00", "Total: 3,100.00", 1), "total 3,100.00 is not the sum"},
		{"smudged line", strings.Replace(workloadExample, "200 pcs @ 3.25", "2OO pcs @ 3.25", 1), "cannot read line item"},
		{"lines out of order", strings.Replace(workloadExample, "2. NUT-M8", "3. NUT-M8", 1), "out of order"},
		{"western grouping", strings.Replace(workloadExample, "Total: 3,150.00", "Total: 3150.000", 1), "total"},
	}
	var ex RuleExtractor
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			answer, err := ex.Extract(t.Context(), "INV-20261013-0001", []byte(tt.doc))
			var ue *UnreadableError
			if !errors.Is(err, ErrUnreadable) || !errors.As(err, &ue) {
				t.Fatalf("got %s, %v; want an unreadable error", answer, err)
			}
			if !strings.Contains(ue.Reason, tt.reason) {
				t.Fatalf("reason %q does not say %q", ue.Reason, tt.reason)
			}
		})
	}
}

func TestRuleExtractorHonoursContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := RuleExtractor{}.Extract(ctx, "INV-20261013-0001", []byte(workloadExample))
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnreadable) {
		t.Fatalf("got %v, want context.Canceled (temporary, not unreadable)", err)
	}
}

func TestParseAnswerEnforcesTheSchema(t *testing.T) {
	t.Parallel()
	good, err := json.Marshal(exampleInvoice())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseAnswer(good); err != nil {
		t.Fatalf("good answer: %v", err)
	}
	change := func(f func(*Invoice)) []byte {
		inv := exampleInvoice()
		f(&inv)
		b, err := json.Marshal(inv)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name   string
		answer []byte
		reason string
	}{
		{"not json", []byte("The invoice is from Sharma Steel Works."), "not line-item JSON"},
		{"unknown field", []byte(strings.Replace(string(good), `"po_ref"`, `"gstin":"x","po_ref"`, 1)), "not line-item JSON"},
		{"trailing data", append(append([]byte{}, good...), []byte(` {}`)...), "data after"},
		{"null", []byte("null"), "invoice number"},
		{"float qty", []byte(strings.Replace(string(good), `"qty":200`, `"qty":200.5`, 1)), "not line-item JSON"},
		{"bad invoice id", change(func(i *Invoice) { i.InvoiceNo = "INV.1" }), "invoice number"},
		{"bad supplier id", change(func(i *Invoice) { i.SupplierID = "SUP 07" }), "supplier id"},
		{"bad warehouse", change(func(i *Invoice) { i.Warehouse = "" }), "warehouse"},
		{"bad po", change(func(i *Invoice) { i.PORef = "PO:1" }), "purchase order"},
		{"bad date", change(func(i *Invoice) { i.Date = "13/10/2026" }), "date"},
		{"no lines", change(func(i *Invoice) { i.Lines = nil; i.TotalPaise = 0 }), "no line items found"},
		{"bad sku", change(func(i *Invoice) { i.Lines[0].SKU = "BOLT M8" }), "sku"},
		{"zero qty", change(func(i *Invoice) { i.Lines[0].Qty, i.Lines[0].AmountPaise, i.TotalPaise = 0, 0, 65000 }), "quantity 0 is not positive"},
		{"negative unit", change(func(i *Invoice) { i.Lines[0].UnitPaise = -1 }), "negative"},
		{"amount", change(func(i *Invoice) { i.Lines[0].AmountPaise++; i.TotalPaise++ }), "line 1: amount"},
		{"total", change(func(i *Invoice) { i.TotalPaise++ }), "total"},
		{"numbering", change(func(i *Invoice) { i.Lines[1].No = 3 }), "line 2 is numbered 3"},
		{"overflow", change(func(i *Invoice) { i.Lines[0].Qty, i.Lines[0].UnitPaise = 1<<40, 1<<40 }), "too large"},
	}
	for _, tt := range tests {
		_, err := ParseAnswer(tt.answer)
		var ue *UnreadableError
		if !errors.As(err, &ue) || !errors.Is(err, ErrUnreadable) || !strings.Contains(ue.Reason, tt.reason) {
			t.Errorf("%s: got %v, want an unreadable error saying %q", tt.name, err, tt.reason)
		}
	}
}

func FuzzParseAnswer(f *testing.F) {
	good, _ := json.Marshal(exampleInvoice())
	f.Add(good)
	f.Add([]byte(`{"lines":[{}]}`))
	f.Fuzz(func(t *testing.T, answer []byte) {
		inv, err := ParseAnswer(answer)
		if err != nil {
			if !errors.Is(err, ErrUnreadable) {
				t.Fatalf("error %v is not ErrUnreadable", err)
			}
			return
		}
		again, err := json.Marshal(inv)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := ParseAnswer(again); err != nil || !reflect.DeepEqual(back, inv) {
			t.Fatalf("re-encoded answer reads back as %+v, %v", back, err)
		}
	})
}

func FuzzRuleExtractor(f *testing.F) {
	f.Add([]byte(workloadExample))
	f.Add([]byte("1. A B 1 pcs @ 1 = 1\n"))
	f.Fuzz(func(t *testing.T, doc []byte) {
		answer, err := RuleExtractor{}.Extract(t.Context(), "INV-20261013-0001", doc)
		if err != nil {
			if !errors.Is(err, ErrUnreadable) {
				t.Fatalf("error %v is not ErrUnreadable", err)
			}
			return
		}
		if _, err := ParseAnswer(answer); err != nil {
			t.Fatalf("Extract's own answer fails ParseAnswer: %v", err)
		}
	})
}
