package recon

import (
	"cmp"
	"slices"
)

// Report is the finance head's summary of a night.
type Report struct {
	Invoices    int      `json:"invoices"`    // invoices read
	Lines       int      `json:"lines"`       // lines of the invoices read
	Adjustments int      `json:"adjustments"` // adjustments flagged
	TotalPaise  int64    `json:"total_paise"` // sum of the adjustments' amounts
	Parked      []Parked `json:"parked"`      // invoices set aside, by invoice number
}

// Parked is an invoice set aside with the reason, for a person to look at.
type Parked struct {
	InvoiceNo string `json:"invoice_no"`
	Reason    string `json:"reason"`
}

// Summarize makes the report of a night from the invoices read, the adjustments and
// the parked invoices.
func Summarize(invs []Invoice, adjs []Adjustment, parked []Parked) Report {
	return SummarizeCounts(len(invs), lineCount(invs), adjs, parked)
}

// SummarizeCounts is Summarize from the number of invoices read and of their lines.
func SummarizeCounts(invoices, lines int, adjs []Adjustment, parked []Parked) Report {
	r := Report{Invoices: invoices, Lines: lines, Adjustments: len(adjs)}
	for _, a := range adjs {
		r.TotalPaise += a.AmountPaise
	}
	r.Parked = slices.SortedFunc(slices.Values(parked), func(a, b Parked) int { return cmp.Compare(a.InvoiceNo, b.InvoiceNo) })
	if r.Parked == nil {
		r.Parked = []Parked{}
	}
	return r
}
