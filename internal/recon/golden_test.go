package recon

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/<name>, or rewrites it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden file (run go test -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file:\ngot:\n%s\nwant:\n%s", name, got, want)
	}
}

func TestMailGolden(t *testing.T) {
	t.Parallel()
	note := DebitNote{SupplierID: "SUP-07", TotalPaise: 2723250, Lines: []Adjustment{
		{InvoiceNo: "INV-20261013-0007", Line: 2, Kind: KindPrice, SupplierID: "SUP-07", SKU: "NUT-M8", AmountPaise: 12000, ValueDeltaPaise: -12000},
		{InvoiceNo: "INV-20261013-0131", Line: 1, Kind: KindQty, SupplierID: "SUP-07", SKU: "BOLT-M10-75", AmountPaise: 2711250, QtyDelta: -1150, ValueDeltaPaise: -2711250},
	}}
	subject, body := DebitNoteText("run-2026-10-13-ldh", "ldh", "2026-10-13", note)
	golden(t, "debit_note.golden", []byte("Subject: "+subject+"\n\n"+body))

	report := Report{Invoices: 312, Lines: 937, Adjustments: 40, TotalPaise: 2715000,
		Parked: []Parked{{InvoiceNo: "INV-20261013-0313", Reason: "no line items found"}}}
	subject, body = ReportText("run-2026-10-13-ldh", "ldh", "2026-10-13", report)
	golden(t, "report.golden", []byte("Subject: "+subject+"\n\n"+body))
}

// TestGenGolden pins gen's output formats: a small night's documents and truth. A
// change here changes every night ever generated; update only on purpose.
func TestGenGolden(t *testing.T) {
	t.Parallel()
	c, _ := genNight(t, GenConfig{Warehouse: "ldh", Date: "2026-10-13", Invoices: 3, Mismatches: 2, Unreadable: 1, Seed: 7})
	var all bytes.Buffer
	docs, err := ListDocuments(c.InboxDir, c.Warehouse, c.Date)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		b, err := os.ReadFile(d.Path)
		if err != nil {
			t.Fatal(err)
		}
		all.WriteString("== " + filepath.Base(d.Path) + "\n")
		all.Write(b)
	}
	truth, err := os.ReadFile(TruthPath(c.TruthDir, c.Warehouse, c.Date))
	if err != nil {
		t.Fatal(err)
	}
	all.WriteString("== truth\n")
	all.Write(truth)
	golden(t, "gen_small_night.golden", all.Bytes())
}
