package recon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// genNight generates into a fresh temp folder and returns the config used.
func genNight(t *testing.T, c GenConfig) (GenConfig, Truth) {
	t.Helper()
	dir := t.TempDir()
	c = withDirs(c, dir)
	truth, err := Generate(t.Context(), c)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	return c, truth
}

func withDirs(c GenConfig, dir string) GenConfig {
	c.InboxDir = filepath.Join(dir, "inbox")
	c.ERPPath = filepath.Join(dir, "erp.db")
	c.TruthDir = filepath.Join(dir, "truth")
	return c
}

func refNight() GenConfig {
	return GenConfig{Warehouse: "ldh", Date: "2026-10-13", Invoices: 312, Mismatches: 40, Seed: 1}
}

// nightFiles reads every document and the truth file of a night, by name.
func nightFiles(t *testing.T, c GenConfig) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	dir := NightDir(c.InboxDir, c.Warehouse, c.Date)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = b
	}
	b, err := os.ReadFile(TruthPath(c.TruthDir, c.Warehouse, c.Date))
	if err != nil {
		t.Fatal(err)
	}
	out["truth"] = b
	return out
}

func TestGenerateIsDeterministic(t *testing.T) {
	t.Parallel()
	c := refNight()
	c.Unreadable = 2
	a, _ := genNight(t, c)
	b, _ := genNight(t, c)
	filesA, filesB := nightFiles(t, a), nightFiles(t, b)
	if len(filesA) != 315 {
		t.Fatalf("got %d files, want 314 documents and the truth", len(filesA))
	}
	for name, want := range filesA {
		if got, ok := filesB[name]; !ok || !bytes.Equal(got, want) {
			t.Fatalf("%s differs between two gens with seed 1", name)
		}
	}

	c.Seed = 2
	other, _ := genNight(t, c)
	filesO := nightFiles(t, other)
	if bytes.Equal(filesO["truth"], filesA["truth"]) {
		t.Fatal("seed 2 gave the same truth as seed 1")
	}
	same := 0
	for name, want := range filesA {
		if bytes.Equal(filesO[name], want) {
			same++
		}
	}
	if same > 0 {
		t.Fatalf("seed 2 gave %d files identical to seed 1's", same)
	}
}

// TestNightReconciles reconciles a generated night with the package's own parts and
// finds exactly the ground truth.
func TestNightReconciles(t *testing.T) {
	t.Parallel()
	for _, unreadable := range []int{0, 2} {
		t.Run(fmt.Sprintf("unreadable=%d", unreadable), func(t *testing.T) {
			t.Parallel()
			c := refNight()
			c.Unreadable = unreadable
			c, truth := genNight(t, c)
			ctx := t.Context()

			loaded, err := LoadTruth(TruthPath(c.TruthDir, c.Warehouse, c.Date))
			if err != nil {
				t.Fatal(err)
			}
			if !jsonEqual(t, loaded, truth) {
				t.Fatal("truth on disk differs from the truth Generate returned")
			}

			docs, err := ListDocuments(c.InboxDir, c.Warehouse, c.Date)
			if err != nil {
				t.Fatal(err)
			}
			if len(docs) != 312+unreadable {
				t.Fatalf("got %d documents, want %d", len(docs), 312+unreadable)
			}
			invs, parked := extractAll(t, ctx, docs)
			if !slices.Equal(parked, truth.Parked) {
				t.Fatalf("parked = %v, want %v", parked, truth.Parked)
			}
			if len(invs) != truth.Invoices {
				t.Fatalf("read %d invoices, truth says %d", len(invs), truth.Invoices)
			}

			db, err := OpenSQLite(ctx, c.ERPPath)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			pos, err := LoadPurchaseOrders(ctx, db, PurchaseOrderRefs(invs))
			if err != nil {
				t.Fatal(err)
			}
			matches, unmatched := MatchLines(invs, pos)
			if len(unmatched) != 0 {
				t.Fatalf("unmatched lines: %v", unmatched)
			}
			received, err := LoadReceipts(ctx, db, c.Warehouse, c.Date)
			if err != nil {
				t.Fatal(err)
			}
			adjs := Compare(matches, received)
			if want := truthAdjustments(truth); !slices.Equal(adjs, want) {
				t.Fatalf("Compare gave %d adjustments, truth has %d:\ngot  %v\nwant %v", len(adjs), len(want), adjs, want)
			}
			for i, a := range adjs {
				if a.KeySuffix() != truth.Adjustments[i].KeySuffix {
					t.Fatalf("adjustment %d key suffix %s, truth %s", i, a.KeySuffix(), truth.Adjustments[i].KeySuffix)
				}
			}
			kinds := map[string]int{}
			for _, a := range adjs {
				kinds[a.Kind]++
			}
			if kinds[KindPrice] != 20 || kinds[KindQty] != 20 {
				t.Fatalf("kinds = %v, want 20 price and 20 qty", kinds)
			}

			var notes []TruthDebitNote
			for _, n := range DebitNotes(adjs) {
				notes = append(notes, TruthDebitNote{SupplierID: n.SupplierID, TotalPaise: n.TotalPaise})
			}
			if !slices.Equal(notes, truth.DebitNotes) {
				t.Fatalf("debit notes = %v, want %v", notes, truth.DebitNotes)
			}

			before, err := LoadStockLevels(ctx, db, c.Warehouse, SKUs(invs))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(before, truth.StockLevelsBefore) {
				t.Fatalf("stock before = %v, want %v", before, truth.StockLevelsBefore)
			}
			if after := ApplyAdjustments(before, adjs); !slices.Equal(after, truth.StockLevelsAfter) {
				t.Fatalf("stock after = %v, want %v", after, truth.StockLevelsAfter)
			}

			r := Summarize(invs, adjs, parked)
			got := TruthReport{Invoices: r.Invoices, Lines: r.Lines, Adjustments: r.Adjustments, TotalPaise: r.TotalPaise}
			if got != truth.Report {
				t.Fatalf("report = %+v, want %+v", got, truth.Report)
			}
			if truth.Report.Adjustments != 40 || truth.Report.Invoices != 312 {
				t.Fatalf("truth report = %+v, want 312 invoices and 40 adjustments", truth.Report)
			}
		})
	}
}

// extractAll reads every document the way the extract step does: Extract, then
// ParseAnswer on the saved answer; unreadable invoices are parked with their reason.
func extractAll(t *testing.T, ctx context.Context, docs []Document) ([]Invoice, []Parked) {
	t.Helper()
	var (
		ex     RuleExtractor
		invs   []Invoice
		parked = []Parked{}
	)
	for _, d := range docs {
		b, err := os.ReadFile(d.Path)
		if err != nil {
			t.Fatal(err)
		}
		answer, err := ex.Extract(ctx, d.InvoiceNo, b)
		if err == nil {
			var inv Invoice
			if inv, err = ParseAnswer(answer); err == nil {
				invs = append(invs, inv)
				continue
			}
		}
		var ue *UnreadableError
		if !errors.Is(err, ErrUnreadable) || !errors.As(err, &ue) || ue.Reason == "" {
			t.Fatalf("%s: got %v, want an unreadable error with a reason", d.InvoiceNo, err)
		}
		parked = append(parked, Parked{InvoiceNo: d.InvoiceNo, Reason: ue.Reason})
	}
	return invs, parked
}

func truthAdjustments(t Truth) []Adjustment {
	out := make([]Adjustment, 0, len(t.Adjustments))
	for _, a := range t.Adjustments {
		out = append(out, a.Adjustment)
	}
	return out
}

func jsonEqual(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(ja, jb)
}

func TestTruthHasTheListedFields(t *testing.T) {
	t.Parallel()
	c := GenConfig{Warehouse: "ldh", Date: "2026-10-13", Invoices: 20, Mismatches: 4, Unreadable: 1, Seed: 3}
	c, _ = genNight(t, c)
	b, err := os.ReadFile(TruthPath(c.TruthDir, c.Warehouse, c.Date))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	requireKeys(t, "truth", doc, "warehouse", "date", "invoices", "adjustments", "debit_notes",
		"stock_levels_before", "stock_levels_after", "parked", "report")
	requireKeys(t, "adjustment", doc["adjustments"].([]any)[0].(map[string]any), "key_suffix", "invoice_no", "line",
		"kind", "supplier_id", "sku", "amount_paise", "qty_delta", "value_delta_paise")
	requireKeys(t, "debit note", doc["debit_notes"].([]any)[0].(map[string]any), "supplier_id", "total_paise")
	requireKeys(t, "stock level", doc["stock_levels_before"].([]any)[0].(map[string]any), "sku", "qty", "value_paise")
	requireKeys(t, "stock level", doc["stock_levels_after"].([]any)[0].(map[string]any), "sku", "qty", "value_paise")
	requireKeys(t, "parked", doc["parked"].([]any)[0].(map[string]any), "invoice_no", "reason")
	requireKeys(t, "report", doc["report"].(map[string]any), "invoices", "lines", "adjustments", "total_paise")
}

func requireKeys(t *testing.T, what string, m map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("%s has no %q", what, k)
		}
	}
}

func TestGenerateAgainReplacesTheNight(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := withDirs(refNight(), t.TempDir())
	if _, err := Generate(ctx, c); err != nil {
		t.Fatal(err)
	}
	db, err := OpenSQLite(ctx, c.ERPPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	levelsBefore, err := LoadStockLevels(ctx, db, c.Warehouse, allSKUs())
	if err != nil {
		t.Fatal(err)
	}

	c.Seed, c.Invoices, c.Mismatches = 9, 50, 6
	truth, err := Generate(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := ListDocuments(c.InboxDir, c.Warehouse, c.Date)
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 50 {
		t.Fatalf("inbox holds %d documents after the second gen, want 50", len(docs))
	}
	received, err := LoadReceipts(ctx, db, c.Warehouse, c.Date)
	if err != nil {
		t.Fatal(err)
	}
	if len(received) != truth.Report.Lines {
		t.Fatalf("%d receipts, want the second gen's %d lines", len(received), truth.Report.Lines)
	}
	var pos int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM purchase_orders`).Scan(&pos); err != nil {
		t.Fatal(err)
	}
	if pos != truth.Report.Lines {
		t.Fatalf("%d purchase-order lines, want the second gen's %d", pos, truth.Report.Lines)
	}
	// Stock levels are running state: the first gen's levels stand.
	known := map[string]StockLevel{}
	for _, l := range levelsBefore {
		known[l.SKU] = l
	}
	for _, l := range truth.StockLevelsBefore {
		if k, ok := known[l.SKU]; ok && k != l {
			t.Fatalf("second gen changed the level of %s from %v to %v", l.SKU, k, l)
		}
	}
}

func TestGenerateNightsShareTheERP(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	nights := []GenConfig{
		{Warehouse: "ldh", Date: "2026-10-13", Invoices: 30, Mismatches: 4, Seed: 1},
		{Warehouse: "del", Date: "2026-10-13", Invoices: 30, Mismatches: 4, Seed: 1},
		{Warehouse: "ldh", Date: "2026-10-14", Invoices: 30, Mismatches: 4, Seed: 1},
	}
	truths := make([]Truth, len(nights))
	for i, c := range nights {
		nights[i] = withDirs(c, dir)
		var err error
		if truths[i], err = Generate(ctx, nights[i]); err != nil {
			t.Fatal(err)
		}
	}
	db, err := OpenSQLite(ctx, nights[0].ERPPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	lines := 0
	for i, c := range nights {
		lines += truths[i].Report.Lines
		docs, err := ListDocuments(c.InboxDir, c.Warehouse, c.Date)
		if err != nil {
			t.Fatal(err)
		}
		invs, _ := extractAll(t, ctx, docs)
		pos, err := LoadPurchaseOrders(ctx, db, PurchaseOrderRefs(invs))
		if err != nil {
			t.Fatal(err)
		}
		matches, unmatched := MatchLines(invs, pos)
		received, err := LoadReceipts(ctx, db, c.Warehouse, c.Date)
		if err != nil {
			t.Fatal(err)
		}
		if adjs := Compare(matches, received); len(unmatched) > 0 || !slices.Equal(adjs, truthAdjustments(truths[i])) {
			t.Fatalf("night %s %s does not reconcile to its truth (unmatched %v)", c.Warehouse, c.Date, unmatched)
		}
	}
	var pos int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM purchase_orders`).Scan(&pos); err != nil {
		t.Fatal(err)
	}
	if pos != lines {
		t.Fatalf("%d purchase-order lines, want %d: a night overwrote another's", pos, lines)
	}
}

func allSKUs() []string {
	var out []string
	for _, s := range catalogue() {
		for _, it := range s.Items {
			out = append(out, it.SKU)
		}
	}
	return out
}

func TestCatalogue(t *testing.T) {
	t.Parallel()
	cat := catalogue()
	if len(cat) != 24 {
		t.Fatalf("%d suppliers, want 24", len(cat))
	}
	seen := map[string]string{}
	for _, s := range cat {
		if !validID(s.ID) || strings.ContainsAny(s.Name, "[]") || len(s.Items) < 5 {
			t.Fatalf("supplier %s %q: bad id or name, or fewer than 5 SKUs", s.ID, s.Name)
		}
		for _, it := range s.Items {
			if !validID(it.SKU) || it.Paise <= 0 || it.Desc == "" {
				t.Fatalf("bad catalogue item %+v", it)
			}
			if other, dup := seen[it.SKU]; dup {
				t.Fatalf("%s sold by %s and %s", it.SKU, other, s.ID)
			}
			seen[it.SKU] = s.ID
		}
	}
	if n := len(seen); n < 140 || n > 160 {
		t.Fatalf("%d SKUs, want about 150", n)
	}
}

func TestGenConfigValidate(t *testing.T) {
	t.Parallel()
	ok := withDirs(refNight(), "/tmp/x")
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	tests := []struct {
		field  string
		change func(*GenConfig)
	}{
		{"Warehouse", func(c *GenConfig) { c.Warehouse = "ld.h" }},
		{"Warehouse", func(c *GenConfig) { c.Warehouse = "" }},
		{"Date", func(c *GenConfig) { c.Date = "13/10/2026" }},
		{"Date", func(c *GenConfig) { c.Date = "2026-02-30" }},
		{"Invoices", func(c *GenConfig) { c.Invoices = -1 }},
		{"Unreadable", func(c *GenConfig) { c.Unreadable = -2 }},
		{"Mismatches", func(c *GenConfig) { c.Mismatches = 313 }},
		{"Mismatches", func(c *GenConfig) { c.Mismatches = -1 }},
		{"InboxDir", func(c *GenConfig) { c.InboxDir = "" }},
		{"ERPPath", func(c *GenConfig) { c.ERPPath = "" }},
		{"TruthDir", func(c *GenConfig) { c.TruthDir = "" }},
	}
	for _, tt := range tests {
		c := ok
		tt.change(&c)
		err := c.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("%+v: got %v, want an error naming %s", c, err, tt.field)
		}
		if _, gerr := Generate(t.Context(), c); !errors.Is(gerr, ErrInvalidConfig) {
			t.Errorf("Generate with bad %s: got %v", tt.field, gerr)
		}
	}
}
