package recon

import (
	"fmt"
	"strings"
	"text/tabwriter"
)

// DebitNoteText is the plain-text mail of a debit note. It names the claim it makes
// (run, warehouse, date, supplier, total) and every line behind it, so a withdrawal can
// point at it and a reader needs nothing else.
func DebitNoteText(runID, warehouse, date string, n DebitNote) (subject, body string) {
	subject = fmt.Sprintf("Debit note %s for run %s: Rs %s", n.SupplierID, runID, FormatPaise(n.TotalPaise))
	var b strings.Builder
	fmt.Fprintf(&b, "Debit note\n\n")
	fmt.Fprintf(&b, "Run:       %s\nWarehouse: %s\nDate:      %s\nSupplier:  %s\n", runID, warehouse, date, n.SupplierID)
	fmt.Fprintf(&b, "Total:     Rs %s (%d paise)\nLines:     %d\n\n", FormatPaise(n.TotalPaise), n.TotalPaise, len(n.Lines))
	b.WriteString("We claim the following amounts, billed above the purchase order or above what was received:\n\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "Invoice\tLine\tKind\tSKU\t%14s\n", "Amount (Rs)")
	for _, a := range n.Lines {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%14s\n", a.InvoiceNo, a.Line, a.Kind, a.SKU, FormatPaise(a.AmountPaise))
	}
	tw.Flush()
	fmt.Fprintf(&b, "\nPlease credit Rs %s against these invoices.\n", FormatPaise(n.TotalPaise))
	return subject, b.String()
}

// ReportText is the plain-text summary of a night for the finance head.
func ReportText(runID, warehouse, date string, r Report) (subject, body string) {
	subject = fmt.Sprintf("Reconciliation %s %s (run %s): %d adjustments, Rs %s", warehouse, date, runID, r.Adjustments, FormatPaise(r.TotalPaise))
	var b strings.Builder
	fmt.Fprintf(&b, "Invoice reconciliation\n\n")
	fmt.Fprintf(&b, "Run:         %s\nWarehouse:   %s\nDate:        %s\n\n", runID, warehouse, date)
	fmt.Fprintf(&b, "Invoices:    %d\nLines:       %d\nAdjustments: %d\n", r.Invoices, r.Lines, r.Adjustments)
	fmt.Fprintf(&b, "Total:       Rs %s (%d paise)\nParked:      %d\n", FormatPaise(r.TotalPaise), r.TotalPaise, len(r.Parked))
	if len(r.Parked) > 0 {
		b.WriteString("\nParked invoices (need a person):\n")
		for _, p := range r.Parked {
			fmt.Fprintf(&b, "  %s: %s\n", p.InvoiceNo, p.Reason)
		}
	}
	return subject, b.String()
}
