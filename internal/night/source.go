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
	docs, err := recon.ListDocuments(s.e.InboxDir, a.Params.Warehouse, a.Params.Date)
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
// after fetch embeds it, so a restart of any of them checks the source first.
type sourceCheck struct{ e *Env }

func (s sourceCheck) CheckSource(ctx context.Context, a *runner.Attempt, fingerprint string) ([]string, error) {
	var f fetchOutput
	if err := input(ctx, a, Fetch, &f); err != nil {
		return nil, err
	}
	now, err := recon.ListDocuments(s.e.InboxDir, a.Params.Warehouse, a.Params.Date)
	if err != nil {
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
