// Package night is the reference job: the nightly invoice reconciliation as a Cairn
// pipeline of eight steps, each glued to the runner.
package night

import (
	"database/sql"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/books"
	"github.com/cairnhq/cairn/internal/ledgerapi"
	"github.com/cairnhq/cairn/internal/recon"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
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

// Pipeline is the reference night's definition (DESIGN.md, "The pipeline"). The fault
// map's fields say how each step's writes are made safe (writes.go, messages.go,
// extract.go); `cairn faultmap` prints them.
var Pipeline = pipeline.Definition{
	Name:       "invoice-reconciliation",
	Input:      []string{ParamWarehouse, ParamDate},
	CheckInput: CheckInput,
	RunID:      RunIDOf,
	NaturalKey: "warehouse and date; a shadow run is an input of its own",
	Steps: []pipeline.Step{
		{
			Name: Fetch, Kind: pipeline.SourceRead, Leased: true, Recovery: "cheap to repeat",
			Checkpoint: "the document list with digests, and the source fingerprint every later step checks after a break; verified against the inbox read: each document listed once, with its digest, nothing else",
		},
		{
			Name: Extract, ChecksSource: true, Kind: pipeline.ModelCall, Leased: true, Recovery: "each answer memoised; a finished invoice is never asked again",
			Checkpoint:  "every answer word for word (cairn-memo), then the parsed lines; verified: every document has its answer memoised under its digest and is read from it, or parked for its reason",
			Effects:     "model call per invoice (paid; the model takes no key)",
			Memo:        "cairn-memo, key <run>.<document digest>.<16 hex of sha256(prompt version + model)>, read before the call, claimed with Create: a second, different answer (two attempts racing) is refused naming both digests and the run handed over, the first staying; the call is audited before it is made",
			ItemRetries: true, RateLimit: "CAIRN_MODEL_RPS",
		},
		{
			Name: Match, ChecksSource: true, Kind: pipeline.Compute, Recovery: "recomputed from saved inputs",
			Checkpoint: "line → purchase-order matches (lease-free commit); verified: every line of the invoices matched or parked, once",
		},
		{
			Name: Compare, ChecksSource: true, Kind: pipeline.SnapshotRead, Leased: true, Recovery: "stock read once, snapshot saved, never re-read",
			Checkpoint: "the stock snapshot (receipts and levels, from the first compare of the night; a rerun compares against its receipts) and the adjustments, verified by recomputing them from the saved snapshot and the matches",
		},
		{
			Name: PostLedger, ChecksSource: true, Kind: pipeline.BusinessWrite, Leased: true, Fenced: true, Recovery: "keys enforced by the ledger; fenced",
			Checkpoint:   "the entries posted, read back by Verify",
			Effects:      "ledger rows (ledger_entries)",
			Key:          "<run>:<invoice>:<line>:<kind> (:g<g> in a rerun), enforced by the ledger's primary key (same payload: no-op; other: handover); fenced",
			Compensation: "reversal entry <key>:rev with the negated amount, fenced",
			ItemRetries:  true,
		},
		{
			Name: UpdateStock, ChecksSource: true, Kind: pipeline.BusinessWrite, Leased: true, Fenced: true, Recovery: "keys enforced by the stock store; fenced",
			Checkpoint:   "the adjustments applied, read back by Verify",
			Effects:      "stock adjustments (stock_adjustments and stock_levels, one transaction)",
			Key:          "<run>:stock:<invoice>:<line>:<kind> (:g<g> in a rerun), enforced by the stock store's primary key (same payload: no-op; other: handover); fenced",
			Compensation: "reversal adjustment <key>:rev with the negated quantity and value, fenced",
			ItemRetries:  true,
		},
		{
			Name: DebitNotes, ChecksSource: true, Kind: pipeline.OutsideMessage, Leased: true, Irreversible: true, Recovery: "outbox; after every reversible write",
			Checkpoint:   "the notes queued and their keys",
			Effects:      "mail: a debit note per supplier, through the outbox",
			Key:          "<run>:debit:<supplier> (:g<g> in a rerun): the outbox Msg-Id, and the sender's mark in cairn-outbox-sent claimed with Create; a restart's note with another text than its saga intent recorded is refused (both digests): handover",
			Compensation: "cancelled while its mark is unclaimed, else a withdrawal note <key>:withdraw naming the claim",
			ItemRetries:  true,
		},
		{
			Name: Report, ChecksSource: true, Kind: pipeline.OutsideMessage, Leased: true, Irreversible: true, Recovery: "outbox",
			Checkpoint:   "the summary sent, and its key",
			Effects:      "mail: the summary to finance, through the outbox",
			Key:          "<run>:report (:g<g> in a rerun): the outbox Msg-Id, and the sender's mark claimed with Create; another text under the key is refused (both digests): handover",
			Compensation: "cancelled while its mark is unclaimed, else a withdrawal <key>:withdraw telling finance the summary no longer stands; a rerun sends its own, <run>:report:g<g>",
			ItemRetries:  true,
		},
	},
}

// The night's outside systems, as its saga records name them (saga.Reverse.System); its
// messages are saga.Mail.
const (
	SystemLedger = "ledger"
	SystemStock  = "stock"
)

// The members of the night's params: a run is one warehouse's night of one date.
const (
	ParamWarehouse = "warehouse"
	ParamDate      = "date"
)

// WarehouseOf is the warehouse of a run's params.
func WarehouseOf(p kc.Params) string { return p.String(ParamWarehouse) }

// DateOf is the date of a run's params (events.DateLayout).
func DateOf(p kc.Params) string { return p.String(ParamDate) }

// AttrSupplier is the attribute of the night's effects an undo selects by: the
// supplier whose entries, adjustments and note they are (`cairn undo --supplier`,
// `--attr supplier=…`).
const AttrSupplier = "supplier"

// Env is what the night's steps work with.
type Env struct {
	InboxDir string
	Ledger   *books.DB
	// LedgerAPI, when set (CAIRN_LEDGER_URL), is the ledger post-ledger and the compensator
	// write through: services/ledger-api over HTTP, one client per service, each signing its
	// requests as that service; Ledger is not used.
	LedgerAPI map[string]*ledgerapi.Client
	ERP       *books.DB // the stock store, and what the night reads
	Memo      jetstream.KeyValue
	Marks     jetstream.KeyValue // cairn-outbox-sent: which messages of earlier generations went
	Extractor recon.Extractor
	MailFrom  string
	FinanceTo string
	// MaxDocumentBytes is the largest document extract reads (CAIRN_MAX_DOCUMENT_BYTES);
	// a larger one's invoice is parked. 0: DefaultMaxDocument.
	MaxDocumentBytes int64
}

// LedgerBook is the book service (post-ledger, the compensator) writes (shadow: the
// shadow tables): over HTTP as that service when LedgerAPI is set, else the ledger
// database.
func (e *Env) LedgerBook(service string, shadow bool) books.Book {
	if e.LedgerAPI != nil {
		if c, ok := e.LedgerAPI[service]; ok {
			return c.Ledger(shadow)
		}
		return unsignedBook{service}
	}
	return e.Ledger.Ledger(shadow)
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
