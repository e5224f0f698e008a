package night

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/recon"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// spyExtractor is the rule extractor, recording what it is asked, with an answer of its
// own for some invoices.
type spyExtractor struct {
	mu      sync.Mutex
	asked   map[string]int
	longest int
	answer  func(invoiceNo string, rule []byte) []byte // nil: the rules' answer
}

func (s *spyExtractor) Extract(ctx context.Context, invoiceNo string, doc []byte) ([]byte, error) {
	s.mu.Lock()
	s.asked[invoiceNo]++
	s.longest = max(s.longest, len(doc))
	s.mu.Unlock()
	b, err := recon.RuleExtractor{}.Extract(ctx, invoiceNo, doc)
	if err != nil || s.answer == nil {
		return b, err
	}
	return s.answer(invoiceNo, b), nil
}

func (s *spyExtractor) Versions() recon.ExtractorVersions { return recon.RuleExtractor{}.Versions() }

// readable returns the night's documents, and the first the rules can read.
func readable(t *testing.T, f *nightFixture) ([]recon.Document, recon.Document) {
	t.Helper()
	docs, err := recon.ListDocuments(f.env.InboxDir, testWarehouse, testDate)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		b, err := os.ReadFile(d.Path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := (recon.RuleExtractor{}).Extract(t.Context(), d.InvoiceNo, b); err == nil {
			return docs, d
		}
	}
	t.Fatal("no readable document")
	return nil, recon.Document{}
}

func parkedReason(rec *kc.Record, item string) (string, bool) {
	for _, p := range rec.Step(Extract).Parked {
		if p.Item == item {
			return p.Reason, true
		}
	}
	return "", false
}

// A 300 MB document (a sparse file) is parked by its size, unread, and the night goes on:
// the extractor never sees a document over the limit, every other invoice is extracted.
func TestAnOversizedDocumentIsParkedUnread(t *testing.T) {
	f := newNightFixture(t)
	spy := &spyExtractor{asked: map[string]int{}}
	f.env.Extractor = spy
	f.env.MaxDocumentBytes = 64 << 10
	_, big := readable(t, f)
	if err := os.Truncate(big.Path, 300<<20); err != nil { // the text, then zeros: sparse
		t.Fatal(err)
	}
	f.run(t, Pipeline.Names(), nil)
	const run = "run-big-document"
	f.start(t, run)
	rec := f.wait(t, run, func(r *kc.Record) bool { return r.Status != kc.Running })
	if rec.Status != kc.WaitingApproval {
		t.Fatalf("run is %s (%s), want waiting before debit-notes for its parked invoices", rec.Status, lastErrors(rec))
	}
	f.approve(t, run)
	rec = f.wait(t, run, func(r *kc.Record) bool { return r.Status != kc.Running })
	if rec.Status != kc.Finishing {
		t.Fatalf("run is %s (%s), want finishing", rec.Status, lastErrors(rec))
	}
	why, ok := parkedReason(rec, big.InvoiceNo)
	if !ok || !strings.HasPrefix(why, ErrDocumentTooLarge.Error()) { // the record keeps the reason cut
		t.Fatalf("parked %+v, want %s parked for its size", rec.Step(Extract).Parked, big.InvoiceNo)
	}
	if n := rec.Step(Extract).ParkedCount; n != 3 {
		t.Errorf("extract parked %d, want the big one and the 2 unreadable ones", n)
	}
	spy.mu.Lock()
	defer spy.mu.Unlock()
	if spy.asked[big.InvoiceNo] != 0 || int64(spy.longest) > f.env.MaxDocumentBytes || len(spy.asked) != 29 {
		t.Fatalf("the extractor was asked about %d invoices (%d times about the big one), the longest %d bytes; want 29, never the big one, none over %d",
			len(spy.asked), spy.asked[big.InvoiceNo], spy.longest, f.env.MaxDocumentBytes)
	}
}

// readDocument never holds more than the limit and one byte, whatever the file's size.
func TestReadDocumentStopsAtTheLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "INV-1.txt")
	if err := os.WriteFile(path, []byte(strings.Repeat("x", 1000)), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := readDocument(path, 1000); err != nil || len(b) != 1000 {
		t.Fatalf("a document at the limit: %d bytes, %v", len(b), err)
	}
	if err := os.Truncate(path, 300<<20); err != nil {
		t.Fatal(err)
	}
	if b, err := readDocument(path, 1000); !errors.Is(err, ErrDocumentTooLarge) || b != nil {
		t.Fatalf("a 300 MB document: %d bytes, %v; want none and ErrDocumentTooLarge", len(b), err)
	}
}

// An answer about another invoice than its document's is parked, not memoised (a resume
// after the model is fixed asks again), and the other invoices go on.
func TestAnAnswerAboutAnotherInvoiceIsParkedNotMemoised(t *testing.T) {
	f := newNightFixture(t)
	docs, wrong := readable(t, f)
	spy := &spyExtractor{asked: map[string]int{}, answer: func(no string, rule []byte) []byte {
		if no != wrong.InvoiceNo {
			return rule
		}
		var inv map[string]any
		if err := json.Unmarshal(rule, &inv); err != nil {
			panic(err)
		}
		inv["invoice_no"] = "INV-20261013-9999"
		b, _ := json.Marshal(inv)
		return b
	}}
	f.env.Extractor = spy
	f.run(t, []string{Fetch, Extract}, nil)
	const run = "run-wrong-answer"
	f.start(t, run)
	rec := f.wait(t, run, func(r *kc.Record) bool { return r.Status != kc.Running || r.Step(Extract).Status == kc.Verified })
	if s := rec.Step(Extract); s.Status != kc.Verified || s.ParkedCount != 3 {
		t.Fatalf("extract %s, %d parked (run %s: %s); want verified with 3 parked", s.Status, s.ParkedCount, rec.Status, lastErrors(rec))
	}
	if why, ok := parkedReason(rec, wrong.InvoiceNo); !ok || !strings.Contains(why, "INV-20261013-9999") {
		t.Fatalf("parked %+v, want %s parked naming the answer's invoice", rec.Step(Extract).Parked, wrong.InvoiceNo)
	}
	for _, d := range docs {
		_, err := f.env.Memo.Get(t.Context(), memoKey(run, d.Digest, spy.Versions()))
		switch {
		case d.InvoiceNo == wrong.InvoiceNo && !errors.Is(err, jetstream.ErrKeyNotFound):
			t.Errorf("the wrong answer about %s is memoised (%v)", d.InvoiceNo, err)
		case d.InvoiceNo != wrong.InvoiceNo && err != nil:
			t.Errorf("the answer about %s is not memoised: %v", d.InvoiceNo, err)
		}
	}
}

func lastErrors(rec *kc.Record) string {
	var errs []string
	for _, n := range rec.Pipeline {
		if e := rec.Step(n).LastError; e != nil {
			errs = append(errs, n+": "+*e)
		}
	}
	return strings.Join(errs, "; ")
}

// BenchmarkReadDocumentOverTheLimit reports what refusing a 300 MB document costs: a few
// allocations, whatever its size (go test -bench ReadDocument -benchmem ./internal/night).
func BenchmarkReadDocumentOverTheLimit(b *testing.B) {
	path := filepath.Join(b.TempDir(), "INV-1.txt")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.Truncate(path, 300<<20); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := readDocument(path, DefaultMaxDocument); !errors.Is(err, ErrDocumentTooLarge) {
			b.Fatal(err)
		}
	}
}
