package recon

import (
	"testing"
	"time"
)

func TestZZBig(t *testing.T) {
	c := withDirs(GenConfig{Warehouse: "ldh", Date: "2026-10-13", Invoices: 100000, Mismatches: 12000, Seed: 1}, t.TempDir())
	start := time.Now()
	tr, err := Generate(t.Context(), c)
	t.Log(time.Since(start), err, tr.Report)
	start = time.Now()
	docs, err := ListDocuments(c.InboxDir, c.Warehouse, c.Date)
	t.Log("list", time.Since(start), len(docs), err, docs[len(docs)-1].InvoiceNo)
}
