// Package night is the reference job: the nightly invoice reconciliation as a Cairn
// pipeline of eight steps, each glued to the runner.
package night

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/books"
	"github.com/cairnhq/cairn/internal/recon"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/runner"
)

// Step names.
const (
	Fetch       = "fetch"
	Extract     = "extract"
	Match       = "match"
	Compare     = "compare"
	PostLedger  = "post-ledger"
	UpdateStock = "update-stock"
	DebitNotes  = "debit-notes"
	Report      = "report"
)

// Pipeline is the reference night's definition (DESIGN.md, "The pipeline").
var Pipeline = pipeline.Definition{
	Name: "invoice-reconciliation",
	Steps: []pipeline.Step{
		{Name: Fetch, Kind: pipeline.SourceRead, Leased: true, Recovery: "cheap to repeat"},
		{Name: Extract, Kind: pipeline.ModelCall, Leased: true, Recovery: "each answer memoised; a finished invoice is never asked again"},
		{Name: Match, Kind: pipeline.Compute, Recovery: "recomputed from saved inputs"},
		{Name: Compare, Kind: pipeline.SnapshotRead, Leased: true, Recovery: "stock read once, snapshot saved, never re-read"},
		{Name: PostLedger, Kind: pipeline.BusinessWrite, Leased: true, Fenced: true, Recovery: "keys enforced by the ledger; fenced"},
		{Name: UpdateStock, Kind: pipeline.BusinessWrite, Leased: true, Fenced: true, Recovery: "keys enforced by the stock store; fenced"},
		{Name: DebitNotes, Kind: pipeline.OutsideMessage, Leased: true, Irreversible: true, Recovery: "outbox; after every reversible write"},
		{Name: Report, Kind: pipeline.OutsideMessage, Leased: true, Irreversible: true, Recovery: "outbox"},
	},
}

// Env is what the night's steps work with.
type Env struct {
	InboxDir  string
	Ledger    *books.DB
	ERP       *books.DB // the stock store, and what the night reads
	Memo      jetstream.KeyValue
	Marks     jetstream.KeyValue // cairn-outbox-sent: which messages of earlier generations went
	Extractor recon.Extractor
	MailFrom  string
	FinanceTo string
}

// Steps returns the implementation of every step.
func (e *Env) Steps() map[string]runner.Step {
	return map[string]runner.Step{
		Fetch:       fetchStep{e},
		Extract:     extractStep{e},
		Match:       matchStep{e},
		Compare:     compareStep{e},
		PostLedger:  postLedgerStep{e},
		UpdateStock: updateStockStep{e},
		DebitNotes:  debitNotesStep{e},
		Report:      reportStep{e},
	}
}

func (e *Env) erp() *sql.DB { return e.ERP.SQL() }

// input decodes an earlier step's JSON output into v.
func input(ctx context.Context, a *runner.Attempt, step string, v any) error {
	b, err := a.Input(ctx, step)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decoding the output of %s: %w", step, err)
	}
	return nil
}

func output(v any) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding output: %w", err)
	}
	return b, nil
}

// createdAt is the run's start, used where a time must be the same on every attempt.
func createdAt(a *runner.Attempt) time.Time {
	t, err := time.Parse(time.RFC3339Nano, a.Record().CreatedAt)
	if err != nil {
		return time.Unix(0, 0).UTC()
	}
	return t
}

func stamp(a *runner.Attempt) string { return a.Now().UTC().Format(time.RFC3339Nano) }

func lowerID(s string) string { return strings.ToLower(s) }

func unmarshal(b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decoding output: %w", err)
	}
	return nil
}
