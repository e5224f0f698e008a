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
	"github.com/cairnhq/cairn/pkg/faults"
	"github.com/cairnhq/cairn/pkg/idempotency"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/retry"
	"github.com/cairnhq/cairn/pkg/runner"
)

// extractOutput is the parsed lines of every readable invoice, and the parked ones. Run
// writes it one invoice at a time, and its readers read it so.
type extractOutput struct {
	Invoices []recon.Invoice `json:"invoices"`
	Parked   []recon.Parked  `json:"parked"`
}

// memoAnswer is what cairn-memo keeps per document: the extractor's answer word for word,
// or its refusal.
type memoAnswer struct {
	Answer     json.RawMessage `json:"answer,omitempty"`
	Unreadable string          `json:"unreadable,omitempty"`
}

type extractStep struct{ e *Env }

func (s extractStep) CheckSource(ctx context.Context, a *runner.Attempt, fp string) ([]string, error) {
	return sourceCheck(s).CheckSource(ctx, a, fp)
}

// memoKey is <run_id>.<document digest hex>.<first 16 hex of sha256(prompt version + model)>.
func memoKey(runID, digest string, v recon.ExtractorVersions) string {
	h := sha256.Sum256([]byte(v.Prompt + v.Model))
	return runID + "." + strings.TrimPrefix(digest, "sha256:") + "." + hex.EncodeToString(h[:])[:16]
}

func (s extractStep) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	var f fetchOutput
	if err := input(ctx, a, Fetch, &f); err != nil {
		return nil, err
	}
	v := s.e.Extractor.Versions()
	// The invoices go into the output as they are parsed: a big night's are never all held.
	d := newDoc(ctx, a)
	d.list("invoices")
	var parkedInv []recon.Parked
	read := 0
	for i, doc := range f.Documents {
		memo, err := s.answer(ctx, a, doc, i+1, v)
		if err != nil {
			return nil, err
		}
		if memo.Unreadable != "" {
			parkedInv = append(parkedInv, recon.Parked{InvoiceNo: doc.InvoiceNo, Reason: memo.Unreadable})
			continue
		}
		inv, err := recon.ParseAnswer(memo.Answer)
		if err == nil && inv.InvoiceNo != doc.InvoiceNo { // a memo of an earlier release: tied by name at least
			err = recon.CheckAnswer(inv, doc, nil)
		}
		if err != nil {
			parkedInv = append(parkedInv, recon.Parked{InvoiceNo: doc.InvoiceNo, Reason: reason(err)})
			continue
		}
		d.item(inv)
		read++
	}
	d.endList()
	d.field("parked", parkedInv)
	b, err := d.done()
	if err != nil {
		return nil, err
	}
	parked := make([]kc.Parked, len(parkedInv))
	for i, p := range parkedInv {
		parked[i] = kc.Parked{Item: p.InvoiceNo, Reason: p.Reason}
	}
	return &runner.Result{
		Output: b, Parked: parked, Items: len(f.Documents), InputFingerprint: f.Fingerprint,
		Versions:   kc.Versions{Prompt: &v.Prompt, Schema: &v.Schema, Model: &v.Model},
		NextAction: fmt.Sprintf("match %d invoices to purchase orders", read),
	}, nil
}

// answer returns the memoised answer for a document, asking the extractor only when there
// is none. The memo is read before the call, so a second answer arises only when two
// attempts raced past the read (saveMemo). Only an answer that is line-item JSON about its
// document (recon.CheckAnswer), or the extractor's finding that the document is unreadable,
// is memoised: an invalid one parks the invoice, and the next attempt (a resume after a
// fix) asks again. A document over the size limit is parked unread.
func (s extractStep) answer(ctx context.Context, a *runner.Attempt, d recon.Document, n int, v recon.ExtractorVersions) (memoAnswer, error) {
	key := memoKey(a.RunID, d.Digest, v)
	var memo memoAnswer
	if e, err := s.e.Memo.Get(ctx, key); err == nil {
		if err := json.Unmarshal(e.Value(), &memo); err != nil {
			return memo, fmt.Errorf("memo %q: %w", key, err)
		}
		return memo, nil
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return memo, runner.Temporary(fmt.Errorf("reading memo %q: %w", key, err))
	}
	if err := a.Fault(ctx, faults.BeforeWrite, n); err != nil {
		return memo, err
	}
	doc, err := readDocument(d.Path, s.e.maxDocument())
	if errors.Is(err, ErrDocumentTooLarge) {
		return memoAnswer{Unreadable: err.Error()}, nil // parked, not memoised: a limit may change
	}
	if err != nil {
		return memo, runner.Temporary(fmt.Errorf("reading %s: %w", d.Path, err))
	}
	if got := recon.DocumentDigest(doc); got != d.Digest {
		return memo, runner.Permanent(fmt.Errorf("%w: %s is %s, fetch read %s", runner.ErrSourceChanged, d.InvoiceNo, got, d.Digest))
	}
	valid := false
	err = a.Retry(ctx, func(try int) error {
		// The call is recorded before it is made: a paid call must be counted even if the
		// process dies during it.
		if err := a.AuditNow(ctx, "extractor.called", d.InvoiceNo, try, map[string]string{"model": v.Model}); err != nil {
			return runner.Temporary(err)
		}
		answer, err := s.e.Extractor.Extract(ctx, d.InvoiceNo, doc)
		var unreadable *recon.UnreadableError
		switch {
		case errors.As(err, &unreadable):
			memo = memoAnswer{Unreadable: reason(err)}
			valid = !unreadable.Invalid
		case errors.Is(err, retry.ErrTemporary):
			return err // retried
		case err != nil:
			return err
		default:
			memo, valid = memoAnswer{Answer: answer}, true
			inv, err := recon.ParseAnswer(answer)
			if err == nil {
				err = recon.CheckAnswer(inv, d, doc)
			}
			if err != nil {
				memo, valid = memoAnswer{Unreadable: reason(err)}, false
			}
		}
		return nil
	})
	if err != nil {
		return memo, err
	}
	if !valid {
		return memo, nil // parked, not memoised
	}
	if memo, err = saveMemo(ctx, s.e.Memo, key, memo); err != nil {
		return memo, err
	}
	if err := a.Fault(ctx, faults.AfterWrite, n); err != nil {
		return memo, err
	}
	return memo, nil
}

func reason(err error) string {
	var u *recon.UnreadableError
	if errors.As(err, &u) {
		return u.Reason
	}
	return err.Error()
}

// Versions are the extractor's prompt, schema and model: a restart under others is recorded
// as a version change.
func (s extractStep) Versions() kc.Versions {
	v := s.e.Extractor.Versions()
	return kc.Versions{Prompt: &v.Prompt, Schema: &v.Schema, Model: &v.Model}
}

// saveMemo claims key for memo with Create. When another attempt saved first, the same
// answer is a harmless repeat and the saved one is returned; another answer is
// idempotency.ErrConflict naming the key and both digests: the saved answer stays (later
// attempts read it), and the run is handed over rather than one of the answers dropped.
func saveMemo(ctx context.Context, kv jetstream.KeyValue, key string, memo memoAnswer) (memoAnswer, error) {
	b, err := json.Marshal(memo)
	if err != nil {
		return memo, err
	}
	_, err = kv.Create(ctx, key, b)
	if err == nil {
		return memo, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return memo, runner.Temporary(fmt.Errorf("saving memo %q: %w", key, err))
	}
	e, err := kv.Get(ctx, key)
	if err != nil {
		return memo, runner.Temporary(fmt.Errorf("reading memo %q: %w", key, err))
	}
	var stored memoAnswer
	if err := json.Unmarshal(e.Value(), &stored); err != nil {
		return memo, fmt.Errorf("memo %q: %w", key, err)
	}
	if !bytes.Equal(e.Value(), b) {
		return stored, fmt.Errorf("saving memo: %w", idempotency.Conflict(key, idempotency.Digest(e.Value()), idempotency.Digest(b)))
	}
	return stored, nil
}
