package night

import (
	"context"
	"fmt"
	"strconv"

	"github.com/cairnhq/cairn/internal/recon"
	"github.com/cairnhq/cairn/pkg/runner"
)

// fetchOutput is the document list with digests and the source fingerprint.
type fetchOutput struct {
	Documents   []recon.Document `json:"documents"`
	Fingerprint string           `json:"fingerprint"`
}

type fetchStep struct{ e *Env }

func (s fetchStep) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	docs, err := recon.ListDocuments(s.e.InboxDir, WarehouseOf(a.Params), DateOf(a.Params))
	if err != nil {
		return nil, runner.Permanent(fmt.Errorf("listing the inbox: %w", err))
	}
	for _, d := range docs {
		a.Audit("document.read", d.InvoiceNo, 0, map[string]string{"digest": d.Digest})
	}
	fp := recon.SourceFingerprint(docs)
	out, err := output(ctx, a, fetchOutput{Documents: docs, Fingerprint: fp})
	if err != nil {
		return nil, err
	}
	return &runner.Result{
		Output: out, InputFingerprint: fp, SourceFingerprint: fp, Items: len(docs), Basis: docs,
		NextAction: "extract the line items of " + strconv.Itoa(len(docs)) + " invoices",
	}, nil
}

// sourceCheck re-hashes the documents a run read and names those that changed. Every step
// after fetch uses it (ChecksSource in Pipeline), so any of them that starts after a break
// (a restart, a resume, a reassignment, a write since the commit: the runner's drift rule) checks
// the source first. The re-hashed list is compared with the run's fingerprint first; the
// fetch output, a list of every document, is read only when they differ, to name what
// changed.
type sourceCheck struct{ e *Env }

func (s matchStep) CheckSource(ctx context.Context, a *runner.Attempt, fp string) ([]string, error) {
	return sourceCheck(s).CheckSource(ctx, a, fp)
}

func (s sourceCheck) CheckSource(ctx context.Context, a *runner.Attempt, fingerprint string) ([]string, error) {
	now, err := recon.ListDocuments(s.e.InboxDir, WarehouseOf(a.Params), DateOf(a.Params))
	if err != nil {
		return nil, err
	}
	if recon.SourceFingerprint(now) == fingerprint {
		return nil, nil
	}
	var f fetchOutput
	if err := peekInput(ctx, a, Fetch, &f); err != nil {
		return nil, err
	}
	was := map[string]string{}
	for _, d := range f.Documents {
		was[d.InvoiceNo] = d.Digest
	}
	var changed []string
	seen := map[string]bool{}
	for _, d := range now {
		seen[d.InvoiceNo] = true
		switch old, ok := was[d.InvoiceNo]; {
		case !ok:
			changed = append(changed, d.InvoiceNo+" (new)")
		case old != d.Digest:
			changed = append(changed, d.InvoiceNo+" (changed)")
		}
	}
	for _, d := range f.Documents {
		if !seen[d.InvoiceNo] {
			changed = append(changed, d.InvoiceNo+" (gone)")
		}
	}
	if len(changed) == 0 && recon.SourceFingerprint(f.Documents) != fingerprint {
		changed = append(changed, "the fetch output (its fingerprint differs from the run's)")
	}
	return changed, nil
}
