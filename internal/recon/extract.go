package recon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Extractor turns a document into an answer (the model's words); the answer is saved
// word for word and read with ParseAnswer, so a saved answer never needs asking again.
// An *UnreadableError is permanent for that invoice (it is parked); an error wrapping
// retry.ErrTemporary is retried; any other error stops the run and hands it over.
type Extractor interface {
	Extract(ctx context.Context, invoiceNo string, doc []byte) (answer []byte, err error)
	Versions() ExtractorVersions
}

// ExtractorVersions names what produced an answer; a change of any of them is a
// version change of the extract step.
type ExtractorVersions struct {
	Prompt string `json:"prompt"`
	Schema string `json:"schema"`
	Model  string `json:"model"`
}

// The rule-based extractor's versions.
const (
	RulePromptVersion = "lines-v1"
	RuleSchemaVersion = "line-items-v1"
	RuleModelVersion  = "rules-1"
)

// RuleExtractor reads the plain-text document format with rules, no model. Its answer
// is the JSON of the Invoice (fields in declaration order, no spaces), so the same
// document always gives the same bytes.
type RuleExtractor struct{}

var _ Extractor = RuleExtractor{}

// Extract parses doc. A document it cannot read gives an *UnreadableError naming why.
func (RuleExtractor) Extract(ctx context.Context, invoiceNo string, doc []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("extracting invoice %q: %w", invoiceNo, err)
	}
	inv, err := parseInvoiceText(invoiceNo, doc)
	if err != nil {
		return nil, err
	}
	answer, err := json.Marshal(inv)
	if err != nil {
		return nil, fmt.Errorf("encoding invoice %q: %w", invoiceNo, err)
	}
	return answer, nil
}

// Versions returns lines-v1, line-items-v1, rules-1.
func (RuleExtractor) Versions() ExtractorVersions {
	return ExtractorVersions{Prompt: RulePromptVersion, Schema: RuleSchemaVersion, Model: RuleModelVersion}
}

// ParseAnswer reads a saved answer and validates it against the line-item schema: valid
// ids, a real date, lines numbered from 1, qty > 0, every amount = qty × unit, total =
// the sum of the amounts; unknown fields and trailing data are refused. Every failure is
// an *UnreadableError, Invalid. Whether the answer is about its document is CheckAnswer's.
func ParseAnswer(answer []byte) (Invoice, error) {
	dec := json.NewDecoder(bytes.NewReader(answer))
	dec.DisallowUnknownFields()
	var inv Invoice
	if err := dec.Decode(&inv); err != nil {
		return Invoice{}, invalidAnswer(unreadable("", "answer is not line-item JSON: %v", err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Invoice{}, invalidAnswer(unreadable(inv.InvoiceNo, "answer has data after its JSON object"))
	}
	if err := inv.check(); err != nil {
		return Invoice{}, invalidAnswer(err)
	}
	return inv, nil
}
