package night

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/recon"
	"github.com/cairnhq/cairn/pkg/runner"
)

// The verifications of fetch, extract, match and compare (DESIGN.md, point 8 of the step
// protocol). Each reads back what the step saved, its output as the runner stored it and
// its inputs from the object store, and the memo, in one pass over each list: the cost is
// linear in the night and no document is read from disk again. The first thing that did
// not hold is the error, naming the document, line or adjustment, expected and found.

// check keeps the first thing that did not hold. The list readers are handed nil: an error
// of theirs would read as a failure of the object store, worth another attempt.
type check struct{ err error }

func (c *check) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf(format, args...)
	}
}

// readOwn reads the step's own output (Verify's r.Output), as readFields reads an input.
func readOwn(ctx context.Context, a *runner.Attempt, b []byte, fs fields) error {
	rd, err := readerOf(ctx, a)
	if err != nil {
		return err
	}
	if err := rd.object(json.NewDecoder(bytes.NewReader(b)), fs); err != nil {
		return readError(a.Step, err)
	}
	return nil
}

// Verify checks the list fetch saved against the inbox it read (r.Basis): every document
// of the inbox listed once, with its digest, and nothing else; the fingerprint the inbox's.
func (s fetchStep) Verify(ctx context.Context, a *runner.Attempt, r *runner.Result) error {
	read, ok := r.Basis.([]recon.Document)
	if !ok {
		return errors.New("the inbox fetch read is not in its result")
	}
	inbox := make(map[string]int, len(read))
	for i, d := range read {
		inbox[d.InvoiceNo] = i
	}
	listed := make([]bool, len(read))
	var c check
	var fp string
	n := 0
	if err := readOwn(ctx, a, r.Output, fields{
		"documents": each(func(d recon.Document) error {
			n++
			i, ok := inbox[d.InvoiceNo]
			switch {
			case !ok:
				c.fail("document %s is listed, but the inbox read has no such document", d.InvoiceNo)
			case listed[i]:
				c.fail("document %s is listed twice", d.InvoiceNo)
			case d != read[i]:
				c.fail("document %s: the inbox read %s (%d bytes, %s), the list says %s (%d bytes, %s)",
					d.InvoiceNo, read[i].Digest, read[i].Size, read[i].Path, d.Digest, d.Size, d.Path)
			default:
				listed[i] = true
			}
			return nil
		}),
		"fingerprint": into(&fp),
	}); err != nil {
		return err
	}
	for i, ok := range listed {
		if !ok {
			c.fail("document %s (%s) of the inbox is not listed: %d listed, %d in the inbox", read[i].InvoiceNo, read[i].Digest, n, len(read))
		}
	}
	if want := recon.SourceFingerprint(read); c.err == nil && (fp != want || r.SourceFingerprint != want) {
		c.fail("the list's fingerprint is %s (the run's %s), the inbox read's %s", fp, r.SourceFingerprint, want)
	}
	return c.err
}

// memoSum is what extract makes of one memoised answer: the reason it parks the document
// (the extractor's refusal, or an answer that does not parse), or the digest of the
// invoice it reads, and that invoice's number.
type memoSum struct {
	parked    string
	invoice   [32]byte
	invoiceNo string
}

func invoiceSum(inv recon.Invoice) [32]byte {
	b, _ := json.Marshal(inv)
	return sha256.Sum256(b)
}

// memoSums reads every answer memoised for the run under versions v, in one pass over the
// bucket's keys of the run, by key.
func (s extractStep) memoSums(ctx context.Context, runID string, v recon.ExtractorVersions) (map[string]memoSum, error) {
	w, err := s.e.Memo.Watch(ctx, runID+".>", jetstream.IgnoreDeletes())
	if err != nil {
		return nil, runner.Temporary(fmt.Errorf("reading the memo: %w", err))
	}
	defer func() { _ = w.Stop() }()
	suffix := strings.TrimPrefix(memoKey("", "", v), ".") // ".<16 hex of the versions>"
	sums := map[string]memoSum{}
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				return nil, runner.Temporary(errors.New("reading the memo: the watch ended"))
			case e == nil: // every key read
				return sums, nil
			case !strings.HasSuffix(e.Key(), suffix):
				continue
			}
			var m memoAnswer
			if err := json.Unmarshal(e.Value(), &m); err != nil {
				sums[e.Key()] = memoSum{parked: "a memo that does not decode: " + err.Error()}
				continue
			}
			switch inv, err := recon.ParseAnswer(m.Answer); {
			case m.Unreadable != "":
				sums[e.Key()] = memoSum{parked: m.Unreadable}
			case err != nil:
				sums[e.Key()] = memoSum{parked: reason(err)}
			default:
				sums[e.Key()] = memoSum{invoice: invoiceSum(inv), invoiceNo: inv.InvoiceNo}
			}
		}
	}
}

// Verify checks that every document fetch listed is in the output once: read, its lines
// those of the answer memoised under its digest, or parked, for the reason the memoised
// answer gives, or with no answer memoised (a document over the size limit, an answer
// about another document: extract keeps no such answer); and that the output holds nothing
// else.
func (s extractStep) Verify(ctx context.Context, a *runner.Attempt, r *runner.Result) error {
	type doc struct {
		no, digest, as string // as: "read" or "parked" once the output has it
	}
	var docs []doc
	at := map[string]int{}
	if err := readFields(ctx, a, Fetch, fields{"documents": each(func(d recon.Document) error {
		at[d.InvoiceNo] = len(docs)
		docs = append(docs, doc{no: d.InvoiceNo, digest: d.Digest})
		return nil
	})}); err != nil {
		return err
	}
	v := s.e.Extractor.Versions()
	memo, err := s.memoSums(ctx, a.RunID, v)
	if err != nil {
		return err
	}
	var c check
	// saved finds the memo of the document the output has as "as"; a read one must have one.
	saved := func(no, as string) (memoSum, bool) {
		i, ok := at[no]
		if !ok {
			c.fail("invoice %s is %s, but fetch listed no such document", no, as)
			return memoSum{}, false
		}
		d := &docs[i]
		if d.as != "" {
			c.fail("document %s is %s, and %s again", no, d.as, as)
			return memoSum{}, false
		}
		d.as = as
		key := memoKey(a.RunID, d.digest, v)
		m, ok := memo[key]
		if !ok && as == "read" {
			c.fail("document %s (%s) is %s, but no answer is memoised under %s", no, d.digest, as, key)
		}
		return m, ok
	}
	parked := 0
	if err := readOwn(ctx, a, r.Output, fields{
		// An invoice is saved as json.Marshal writes it (doc.item): its bytes are hashed as
		// they are, not decoded and encoded again.
		"invoices": each(func(raw json.RawMessage) error {
			var inv struct {
				InvoiceNo string `json:"invoice_no"`
			}
			if err := json.Unmarshal(raw, &inv); err != nil {
				c.fail("an invoice saved does not decode: %v", err)
				return nil
			}
			m, ok := saved(inv.InvoiceNo, "read")
			switch got := sha256.Sum256(raw); {
			case !ok:
			case m.parked != "":
				c.fail("document %s: its lines are saved, but its memoised answer parks it (%s)", inv.InvoiceNo, m.parked)
			case m.invoiceNo != inv.InvoiceNo:
				c.fail("document %s: its memoised answer is about invoice %s", inv.InvoiceNo, m.invoiceNo)
			case got != m.invoice:
				c.fail("document %s: its memoised answer reads as sha256:%s, the lines saved are sha256:%s",
					inv.InvoiceNo, hex.EncodeToString(m.invoice[:]), hex.EncodeToString(got[:]))
			}
			return nil
		}),
		"parked": each(func(p recon.Parked) error {
			parked++
			m, ok := saved(p.InvoiceNo, "parked")
			switch {
			case !ok: // parked with no answer kept
			case m.parked == "" && m.invoiceNo == p.InvoiceNo:
				c.fail("document %s is parked (%s), but its memoised answer reads", p.InvoiceNo, p.Reason)
			case m.parked == "": // a memo about another invoice (an earlier release kept it): parked
			case m.parked != p.Reason:
				c.fail("document %s: parked for %q, its memoised answer for %q", p.InvoiceNo, p.Reason, m.parked)
			}
			return nil
		}),
	}); err != nil {
		return err
	}
	for _, d := range docs {
		if d.as == "" {
			c.fail("document %s (%s) is neither read nor parked: %d documents fetched", d.no, d.digest, len(docs))
		}
	}
	if c.err == nil && parked != len(r.Parked) {
		c.fail("the output parks %d documents, the record %d", parked, len(r.Parked))
	}
	return c.err
}

// Verify checks that every line of extract's invoices is matched or parked, once, and that
// a match is of its line (SKU, quantity, price, supplier); the output holds no other line.
func (s matchStep) Verify(ctx context.Context, a *runner.Attempt, r *runner.Result) error {
	type line struct {
		no         int
		supplier   string
		sku        string
		qty, price int64
		as         string // "matched" or "parked" once the output has it
	}
	lines := map[string][]line{} // by invoice
	var order []string
	// Only the fields checked are decoded: a big night has hundreds of thousands of lines.
	type invoice struct {
		InvoiceNo  string `json:"invoice_no"`
		SupplierID string `json:"supplier_id"`
		Lines      []struct {
			No        int    `json:"no"`
			SKU       string `json:"sku"`
			Qty       int64  `json:"qty"`
			UnitPaise int64  `json:"unit_paise"`
		} `json:"lines"`
	}
	if err := readFields(ctx, a, Extract, fields{"invoices": each(func(inv invoice) error {
		ls := make([]line, len(inv.Lines))
		for i, l := range inv.Lines {
			ls[i] = line{no: l.No, supplier: inv.SupplierID, sku: l.SKU, qty: l.Qty, price: l.UnitPaise}
		}
		lines[inv.InvoiceNo] = ls
		order = append(order, inv.InvoiceNo)
		return nil
	})}); err != nil {
		return err
	}
	var c check
	mark := func(inv string, no int, as string) *line {
		ls := lines[inv]
		for i := range ls {
			if ls[i].no != no {
				continue
			}
			if ls[i].as != "" {
				c.fail("line %s:%d is %s, and %s again", inv, no, ls[i].as, as)
				return nil
			}
			ls[i].as = as
			return &ls[i]
		}
		c.fail("line %s:%d is %s, but extract read no such line", inv, no, as)
		return nil
	}
	parked := 0
	if err := readOwn(ctx, a, r.Output, fields{
		"matches": each(func(m struct {
			InvoiceNo       string `json:"invoice_no"`
			Line            int    `json:"line"`
			SupplierID      string `json:"supplier_id"`
			SKU             string `json:"sku"`
			BilledQty       int64  `json:"billed_qty"`
			BilledUnitPaise int64  `json:"billed_unit_paise"`
		}) error {
			if l := mark(m.InvoiceNo, m.Line, "matched"); l != nil &&
				(m.SKU != l.sku || m.BilledQty != l.qty || m.BilledUnitPaise != l.price || m.SupplierID != l.supplier) {
				c.fail("line %s:%d: extract read %d × %s at %d paise from %s, the match says %d × %s at %d paise from %s",
					m.InvoiceNo, m.Line, l.qty, l.sku, l.price, l.supplier, m.BilledQty, m.SKU, m.BilledUnitPaise, m.SupplierID)
			}
			return nil
		}),
		"unmatched": each(func(u struct {
			InvoiceNo string `json:"invoice_no"`
			Line      int    `json:"line"`
		}) error {
			parked++
			mark(u.InvoiceNo, u.Line, "parked")
			return nil
		}),
	}); err != nil {
		return err
	}
	for _, inv := range order {
		for _, l := range lines[inv] {
			if l.as == "" {
				c.fail("line %s:%d is neither matched nor parked", inv, l.no)
			}
		}
	}
	if c.err == nil && parked != len(r.Parked) {
		c.fail("the output parks %d lines, the record %d", parked, len(r.Parked))
	}
	return c.err
}

// savedSnapshot decodes the snapshot compare saved: this attempt's (r.Snapshot, read back
// from the store) or the run's snapshot, kept from the night's first compare.
func savedSnapshot(ctx context.Context, a *runner.Attempt, r *runner.Result, snap *snapshot) error {
	b := []byte(nil)
	if r != nil {
		b = r.Snapshot
	}
	if len(b) == 0 {
		var err error
		if b, err = a.Snapshot(ctx); err != nil {
			return readError(a.Step, err)
		}
	}
	return unmarshal(ctx, a, b, snap)
}

// Verify recomputes the adjustments from the saved snapshot's receipts and match's lines
// and checks them, one by one, against the output.
func (s compareStep) Verify(ctx context.Context, a *runner.Attempt, r *runner.Result) error {
	var snap snapshot
	if err := savedSnapshot(ctx, a, r, &snap); err != nil {
		return err
	}
	cmp := recon.NewComparer(snap.Receipts)
	if err := readFields(ctx, a, Match, fields{"matches": each(func(m recon.Match) error { cmp.Add(m); return nil })}); err != nil {
		return err
	}
	want := cmp.Adjustments()
	var c check
	n := 0
	if err := readOwn(ctx, a, r.Output, fields{"adjustments": each(func(got recon.Adjustment) error {
		switch {
		case n >= len(want):
			c.fail("adjustment %s (%s) is saved, but the saved snapshot and the matches recompute only %d adjustments", got.KeySuffix(), adjustmentText(got), len(want))
		case got != want[n]:
			c.fail("adjustment %d: recomputed from the saved snapshot and the matches %s (%s), saved %s (%s)",
				n+1, want[n].KeySuffix(), adjustmentText(want[n]), got.KeySuffix(), adjustmentText(got))
		}
		n++
		return nil
	})}); err != nil {
		return err
	}
	if n < len(want) {
		c.fail("adjustment %s (%s) recomputes from the saved snapshot and the matches, but is not saved: %d saved, %d recomputed",
			want[n].KeySuffix(), adjustmentText(want[n]), n, len(want))
	}
	return c.err
}

func adjustmentText(x recon.Adjustment) string {
	return fmt.Sprintf("%s %s, %d paise, qty %+d, value %+d", x.SupplierID, x.SKU, x.AmountPaise, x.QtyDelta, x.ValueDeltaPaise)
}
