package night

import (
	"context"
	"fmt"
	"slices"

	"github.com/cairnhq/cairn/internal/recon"
	"github.com/cairnhq/cairn/pkg/outbox"
	"github.com/cairnhq/cairn/pkg/runner"
	"github.com/cairnhq/cairn/pkg/supervisor"
)

// noteOutput lists the debit notes queued, with their keys.
type noteOutput struct {
	Notes []queuedNote `json:"notes"`
}

type queuedNote struct {
	SupplierID string `json:"supplier_id"`
	TotalPaise int64  `json:"total_paise"`
	Key        string `json:"key"`
}

type debitNotesStep struct{ e *Env }

func (s debitNotesStep) CheckSource(ctx context.Context, a *runner.Attempt, fp string) ([]string, error) {
	return sourceCheck(s).CheckSource(ctx, a, fp)
}

func (s debitNotesStep) message(a *runner.Attempt, kind, key, to, subject, body string) outbox.Message {
	return outbox.Message{
		Key: key, RunID: a.RunID, Kind: kind, Step: a.Step, Generation: a.Generation, Token: a.Token.Value,
		Shadow: a.Params.Shadow, From: s.e.MailFrom, To: []string{to}, Subject: subject, Body: body, QueuedAt: createdAt(a),
	}
}

func (s debitNotesStep) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	adjs, err := adjustments(ctx, a)
	if err != nil {
		return nil, err
	}
	notes := recon.DebitNotes(adjs)
	out := noteOutput{Notes: make([]queuedNote, len(notes))}
	keys := make([]string, len(notes))
	for i, n := range notes {
		keys[i] = a.RunID + ":debit:" + n.SupplierID
		out.Notes[i] = queuedNote{SupplierID: n.SupplierID, TotalPaise: n.TotalPaise, Key: keys[i]}
	}
	if err := keyed(ctx, a, keys, func(i int) error {
		subject, body := recon.DebitNoteText(a.RunID, a.Params.Warehouse, a.Params.Date, notes[i])
		to := "accounts+" + lowerID(notes[i].SupplierID) + "@suppliers.example"
		return outbox.Queue(ctx, a.JS(), s.message(a, "debit", keys[i], to, subject, body))
	}); err != nil {
		return nil, err
	}
	return result(out, len(keys), "send the report of "+a.RunID)
}

// Verify checks every note is on the outbox.
func (s debitNotesStep) Verify(ctx context.Context, a *runner.Attempt, r *runner.Result) error {
	var out noteOutput
	if err := unmarshal(r.Output, &out); err != nil {
		return err
	}
	keys := make([]string, len(out.Notes))
	for i, n := range out.Notes {
		keys[i] = n.Key
	}
	return queuedAll(ctx, a, keys)
}

// queuedAll checks that every key is on the run's outbox.
func queuedAll(ctx context.Context, a *runner.Attempt, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	msgs, err := supervisor.Queued(ctx, a.JS(), a.RunID)
	if err != nil {
		return runner.Temporary(err)
	}
	have := make([]string, len(msgs))
	for i, m := range msgs {
		have[i] = m.Key
	}
	for _, k := range keys {
		if !slices.Contains(have, k) {
			return fmt.Errorf("message %s is not on the outbox", k)
		}
	}
	return nil
}

type reportStep struct{ e *Env }

func (s reportStep) CheckSource(ctx context.Context, a *runner.Attempt, fp string) ([]string, error) {
	return sourceCheck(s).CheckSource(ctx, a, fp)
}

// reportOutput is the summary sent, and its key.
type reportOutput struct {
	Keys   []string     `json:"keys"`
	Report recon.Report `json:"report"`
}

func (s reportStep) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	var ex extractOutput
	if err := input(ctx, a, Extract, &ex); err != nil {
		return nil, err
	}
	adjs, err := adjustments(ctx, a)
	if err != nil {
		return nil, err
	}
	rep := recon.Summarize(ex.Invoices, adjs, ex.Parked)
	key := a.RunID + ":report"
	if err := keyed(ctx, a, []string{key}, func(int) error {
		subject, body := recon.ReportText(a.RunID, a.Params.Warehouse, a.Params.Date, rep)
		return outbox.Queue(ctx, a.JS(), debitNotesStep(s).message(a, "report", key, s.e.FinanceTo, subject, body))
	}); err != nil {
		return nil, err
	}
	return result(reportOutput{Keys: []string{key}, Report: rep}, 1, "deliver the report of "+a.RunID)
}

// Verify checks the report is on the outbox.
func (s reportStep) Verify(ctx context.Context, a *runner.Attempt, r *runner.Result) error {
	var out reportOutput
	if err := unmarshal(r.Output, &out); err != nil {
		return err
	}
	return queuedAll(ctx, a, out.Keys)
}
