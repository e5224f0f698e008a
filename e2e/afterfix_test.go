package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cairnhq/cairn/internal/recon"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// An invoice is corrected between a crash and the restart: the run stops before doing
// anything and is handed over naming the document; a person resumes it --after-fix; the
// rerun (generation 1) accepts the new source, reverses the ledger entry the correction
// removed, stops before debit-notes on that evidence until a person approves, and the books,
// stock and mail show the corrected night.
func TestResumeAfterFixOfACorrectedInvoice(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newNight(t, 0)
	fix := n.pickCorrection()
	keys := n.sortedLedgerKeys()
	if i := slices.Index(keys, runID+":"+fix.KeySuffix); i >= 23 {
		t.Fatalf("the corrected entry is written %dth, want it among the 23 written before the crash", i+1)
	}

	fault := "post-ledger.before-write.24=exit@once"
	n.crash(fault)
	n.correctInvoice(fix)
	n.start("CAIRN_FAULTS=" + fault)
	rec := n.waitStatus(runLimit, kc.HandedOver, kc.Done)
	if rec.Status != kc.HandedOver || rec.Step("post-ledger").LastError == nil || !strings.Contains(*rec.Step("post-ledger").LastError, fix.InvoiceNo) {
		t.Fatalf("status %s, post-ledger last error %v; want handed over naming %s", rec.Status, rec.Step("post-ledger").LastError, fix.InvoiceNo)
	}
	if rows := n.scalar("ledger.db", `SELECT count(*) FROM ledger_entries`); rows != 23 {
		t.Fatalf("after the handover the ledger holds %d rows, want the 23 of before the crash", rows)
	}

	n.publish(events.RunSubject(runID, events.VerbResume), `{"after_fix":true}`)
	// The source changed during the run: the rerun stops before debit-notes, which cannot be
	// undone, until a person approves.
	n.approveUnclear(1, "the source changed during the run and fetch read it again after a fix")
	rec = n.waitRecord(runLimit, "generation 1 done or handed over", func(r *kc.Record) bool {
		return r.Generation == 1 && (r.Status == kc.Done || r.Status == kc.HandedOver)
	})
	if rec.Status != kc.Done {
		t.Fatalf("status %s generation %d after resume --after-fix; next: %s", rec.Status, rec.Generation, rec.NextAction)
	}
	want := slices.DeleteFunc(slices.Clone(n.truth.Adjustments), func(a recon.TruthAdjustment) bool { return a.KeySuffix == fix.KeySuffix })

	// Ledger: what stands is the corrected night; the removed entry has its reversal.
	standing := n.standing("ledger.db", `SELECT key, amount_paise, reverses FROM ledger_entries`)
	wantLedger := map[string]int64{}
	var total int64
	for _, a := range want {
		wantLedger[runID+":"+a.KeySuffix] = a.AmountPaise
		total += a.AmountPaise
	}
	if fmt.Sprint(standing) != fmt.Sprint(wantLedger) {
		t.Errorf("standing ledger entries %v, want %v", standing, wantLedger)
	}
	if sum := n.scalar("ledger.db", `SELECT sum(amount_paise) FROM ledger_entries`); int64(sum) != total {
		t.Errorf("ledger sum %d, want %d", sum, total)
	}
	if got := n.scalar("ledger.db", fmt.Sprintf(`SELECT amount_paise FROM ledger_entries WHERE key = '%s:%s:rev'`, runID, fix.KeySuffix)); int64(got) != -fix.AmountPaise {
		t.Errorf("reversal of the corrected entry: %d, want %d", got, -fix.AmountPaise)
	}

	// Stock: the corrected adjustment was never applied.
	for _, l := range n.truth.StockLevelsAfter {
		q, v := l.Qty, l.ValuePaise
		if l.SKU == fix.SKU {
			q, v = q-fix.QtyDelta, v-fix.ValueDeltaPaise
		}
		var gq, gv int64
		if err := n.db("erp.db").QueryRow(`SELECT qty, value_paise FROM stock_levels WHERE warehouse = ? AND sku = ?`, warehouse, l.SKU).Scan(&gq, &gv); err != nil || gq != q || gv != v {
			t.Errorf("stock level %s: %d/%d (%v), want %d/%d", l.SKU, gq, gv, err, q, v)
		}
	}
	if got := len(n.standing("erp.db", `SELECT key, qty_delta, reverses FROM stock_adjustments`)); got != len(want) {
		t.Errorf("standing stock adjustments %d, want %d", got, len(want))
	}

	// Mail: generation 1's debit notes and report, the corrected supplier's total lowered.
	notes := recon.DebitNotes(adjustmentsOf(want))
	var wantKeys []string
	for _, d := range notes {
		wantKeys = append(wantKeys, runID+":debit:"+d.SupplierID+":g1")
	}
	wantKeys = append(wantKeys, runID+":report:g1")
	slices.Sort(wantKeys)
	if got := n.mailKeys(); !slices.Equal(got, wantKeys) {
		t.Errorf("mail keys %v, want %v", got, wantKeys)
	}
	if c := n.audit(); c["extractor.called"] != 313 {
		t.Errorf("extractor calls %d, want 313: only the corrected invoice asked again", c["extractor.called"])
	}
}

// pickCorrection chooses a qty adjustment whose line has no price adjustment, of a supplier
// with other adjustments (so its debit note stands, lowered).
func (n *night) pickCorrection() recon.TruthAdjustment {
	n.t.Helper()
	bySupplier := map[string]int{}
	lines := map[string]int{}
	for _, a := range n.truth.Adjustments {
		bySupplier[a.SupplierID]++
		lines[fmt.Sprintf("%s:%d", a.InvoiceNo, a.Line)]++
	}
	for _, a := range n.truth.Adjustments {
		if a.Kind == recon.KindQty && lines[fmt.Sprintf("%s:%d", a.InvoiceNo, a.Line)] == 1 && bySupplier[a.SupplierID] > 1 {
			return a
		}
	}
	n.t.Fatal("no adjustment fits the correction")
	return recon.TruthAdjustment{}
}

func (n *night) sortedLedgerKeys() []string {
	var keys []string
	for _, a := range n.truth.Adjustments {
		keys = append(keys, runID+":"+a.KeySuffix)
	}
	slices.Sort(keys)
	return keys
}

var itemLine = regexp.MustCompile(`^(\d+)\. (.*?)(\d+) pcs @ ([0-9,]+\.\d\d) = ([0-9,]+\.\d\d)$`)

// correctInvoice rewrites the adjustment's invoice so its line bills what was received.
func (n *night) correctInvoice(a recon.TruthAdjustment) {
	n.t.Helper()
	path := filepath.Join(recon.NightDir(filepath.Join(n.dir, "inbox"), warehouse, date), a.InvoiceNo+".txt")
	b, err := os.ReadFile(path)
	if err != nil {
		n.t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var delta int64
	for i, l := range lines {
		m := itemLine.FindStringSubmatch(l)
		if m == nil || m[1] != strconv.Itoa(a.Line) {
			continue
		}
		qty, _ := strconv.ParseInt(m[3], 10, 64)
		unit, err1 := recon.ParsePaise(m[4])
		amount, err2 := recon.ParsePaise(m[5])
		if err1 != nil || err2 != nil {
			n.t.Fatalf("line %q: %v %v", l, err1, err2)
		}
		qty += a.QtyDelta // QtyDelta is minus what was billed over the receipt
		lines[i] = fmt.Sprintf("%s. %s%d pcs @ %s = %s", m[1], m[2], qty, m[4], recon.FormatPaise(qty*unit))
		delta = qty*unit - amount
	}
	if delta == 0 {
		n.t.Fatalf("line %d of %s not found or unchanged", a.Line, a.InvoiceNo)
	}
	for i, l := range lines {
		if t, ok := strings.CutPrefix(l, "Total: "); ok {
			total, err := recon.ParsePaise(t)
			if err != nil {
				n.t.Fatal(err)
			}
			lines[i] = "Total: " + recon.FormatPaise(total+delta)
		}
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		n.t.Fatal(err)
	}
}

// scalar runs a query that returns one integer.
func (n *night) scalar(db, q string) int {
	n.t.Helper()
	var v int
	if err := n.db(db).QueryRow(q).Scan(&v); err != nil {
		n.t.Fatalf("%s: %v", q, err)
	}
	return v
}

// standing reads (key, amount, reverses) rows and returns the rows not reversed, by key
// without its generation suffix.
func (n *night) standing(db, q string) map[string]int64 {
	n.t.Helper()
	rows, err := n.db(db).Query(q)
	if err != nil {
		n.t.Fatal(err)
	}
	defer rows.Close()
	all := map[string]int64{}
	reversed := map[string]bool{}
	for rows.Next() {
		var k string
		var v int64
		var rev *string
		if err := rows.Scan(&k, &v, &rev); err != nil {
			n.t.Fatal(err)
		}
		if rev != nil {
			reversed[*rev] = true
			continue
		}
		all[k] = v
	}
	out := map[string]int64{}
	gen := regexp.MustCompile(`:g\d+$`)
	for k, v := range all {
		if reversed[k] {
			continue
		}
		base := gen.ReplaceAllString(k, "")
		if _, twice := out[base]; twice {
			n.t.Errorf("%s stands twice", base)
		}
		out[base] = v
	}
	return out
}

// mailKeys lists the X-Cairn-Key of every mail sent, sorted.
func (n *night) mailKeys() []string {
	n.t.Helper()
	files, _ := filepath.Glob(filepath.Join(n.dir, "mail", "*.eml"))
	var keys []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			n.t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if k, ok := strings.CutPrefix(strings.TrimRight(l, "\r"), "X-Cairn-Key: "); ok {
				keys = append(keys, k)
			}
		}
	}
	slices.Sort(keys)
	return keys
}

func adjustmentsOf(ts []recon.TruthAdjustment) []recon.Adjustment {
	out := make([]recon.Adjustment, len(ts))
	for i, a := range ts {
		out[i] = a.Adjustment
	}
	return out
}
