package night

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/cairnhq/cairn/internal/recon"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/outbox"
	"github.com/cairnhq/cairn/pkg/runner"
	"github.com/cairnhq/cairn/pkg/saga"
	"github.com/cairnhq/cairn/pkg/supervisor"
)

// noteOutput lists the debit notes that stand, with their keys, and (in a rerun) the
// withdrawals of notes that no longer do.
type noteOutput struct {
	Notes     []queuedNote `json:"notes"`
	Withdrawn []string     `json:"withdrawn,omitempty"`
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

// notePlan is what debit-notes will do: the notes that will stand, and the writes (the
// withdrawals of notes that no longer stand, then the new notes) in order.
type notePlan struct {
	notes  []recon.DebitNote
	rows   rowPlan[outbox.Message]
	writes []outbox.Message
}

func (s debitNotesStep) plan(ctx context.Context, a *runner.Attempt) (notePlan, error) {
	adjs, err := adjustments(ctx, a)
	if err != nil {
		return notePlan{}, err
	}
	notes := recon.DebitNotes(adjs)
	desired := make([]outbox.Message, len(notes))
	for i, n := range notes {
		subject, body := recon.DebitNoteText(a.RunID, WarehouseOf(a.Params), DateOf(a.Params), n)
		to := SupplierAddress(n.SupplierID)
		desired[i] = s.message(a, "debit", a.RunID+":debit:"+n.SupplierID, to, subject, body)
	}
	var existing []outbox.Message
	if a.Generation > 0 {
		if existing, err = s.standingNotes(ctx, a); err != nil {
			return notePlan{}, err
		}
	}
	p := planRows(a.Generation, desired, existing, s.noteOps(a))
	return notePlan{notes: notes, rows: p, writes: append(slices.Clip(p.reverse), p.write...)}, nil
}

// plannedMessage is a message as a person approves it: what goes to whom, not when or by
// which attempt.
type plannedMessage struct {
	Key      string   `json:"key"`
	Kind     string   `json:"kind"`
	To       []string `json:"to"`
	Subject  string   `json:"subject"`
	Body     string   `json:"body"`
	Reverses string   `json:"reverses,omitempty"`
}

// Plan is the messages debit-notes will queue, for a person to approve.
func (s debitNotesStep) Plan(ctx context.Context, a *runner.Attempt) ([]byte, error) {
	p, err := s.plan(ctx, a)
	if err != nil {
		return nil, err
	}
	out := make([]plannedMessage, len(p.writes))
	for i, m := range p.writes {
		out[i] = plannedMessage{Key: m.Key, Kind: m.Kind, To: m.To, Subject: m.Subject, Body: m.Body, Reverses: m.Reverses}
	}
	// Whole, as json.Marshal writes it: a plan is for a person to read.
	b, err := json.Marshal(struct {
		Messages []plannedMessage `json:"messages"`
	}{out})
	if err != nil {
		return nil, fmt.Errorf("encoding the plan: %w", err)
	}
	return b, nil
}

func (s debitNotesStep) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	p, err := s.plan(ctx, a)
	if err != nil {
		return nil, err
	}
	writes := p.writes
	if err := keyed(ctx, a, mailEffects(a, writes, s.noteOps(a)), func(i int) error { return outbox.Queue(ctx, a.JS(), writes[i], outbox.SignedBy(a.Signer())) }); err != nil {
		return nil, err
	}
	out := noteOutput{Notes: make([]queuedNote, len(p.rows.stand))}
	for i, m := range p.rows.stand {
		out.Notes[i] = queuedNote{SupplierID: p.notes[i].SupplierID, TotalPaise: p.notes[i].TotalPaise, Key: m.Key}
	}
	for _, w := range p.rows.reverse {
		out.Withdrawn = append(out.Withdrawn, w.Key)
	}
	return result(ctx, a, out, len(writes), "send the report of "+a.RunID)
}

// standingNotes are the debit notes of earlier generations that went (or are still to go,
// when queued by this generation), none withdrawn since.
func (s debitNotesStep) standingNotes(ctx context.Context, a *runner.Attempt) ([]outbox.Message, error) {
	msgs, err := supervisor.Queued(ctx, a.JS(), assets.Default, outboxTrust(a), a.RunID)
	if err != nil {
		return nil, runner.Temporary(err)
	}
	var out []outbox.Message
	for _, m := range msgs {
		switch {
		case m.Kind == "withdraw":
			m.Reverses = strings.TrimSuffix(m.Key, ":withdraw")
			out = append(out, m)
		case m.Kind != "debit":
		case m.Generation == a.Generation:
			out = append(out, m)
		default:
			mark, err := outbox.MarkOf(ctx, s.e.Marks, a.RunID, m.Key)
			if err != nil {
				return nil, runner.Temporary(err)
			}
			if mark == outbox.Sent {
				out = append(out, m)
			}
		}
	}
	return out, nil
}

// mailEffects describes queued messages for the saga: a message is reversed by its
// withdrawal (or, never sent, by cancelling it); a withdrawal is never reversed. Its digest
// (outbox.Digest) is what a restart's copy must match: the outbox cannot compare copies
// queued under different tokens.
func mailEffects(a *runner.Attempt, ms []outbox.Message, ops rowOps[outbox.Message]) []runner.Effect {
	out := make([]runner.Effect, len(ms))
	for i, m := range ms {
		supplier := ""
		if m.Kind == "debit" {
			supplier = baseKey(strings.TrimPrefix(m.Key, a.RunID+":debit:"))
		}
		out[i] = runner.Effect{Key: m.Key, Attrs: supplierAttrs(supplier), Payload: intentOf(m), Digest: outbox.Digest(m)}
		if m.Reverses == "" {
			w := ops.reversal(m)
			out[i].Reverse = reverseWith(saga.Mail, w, w.Key)
		}
	}
	return out
}

// mailIntent is what a message's saga intent records of it: to whom, what, and the digest
// of its body, not the body (the message itself is on CAIRN_OUTBOX), so that the record stays
// small whatever the size of a note.
type mailIntent struct {
	Kind       string   `json:"kind"`
	To         []string `json:"to"`
	Subject    string   `json:"subject"`
	BodyDigest string   `json:"body_digest"`
	BodySize   int      `json:"body_size"`
	Reverses   string   `json:"reverses,omitempty"`
}

func intentOf(m outbox.Message) mailIntent {
	sum := sha256.Sum256([]byte(m.Body))
	return mailIntent{Kind: m.Kind, To: m.To, Subject: m.Subject, BodyDigest: "sha256:" + hex.EncodeToString(sum[:]),
		BodySize: len(m.Body), Reverses: m.Reverses}
}

// quoteMax bounds what a withdrawal quotes of the message it withdraws: the withdrawal is
// the reversal a saga intent carries, and must stay small whatever the size of a note.
const quoteMax = 4 << 10

// quote is body, or its first lines within quoteMax bytes and a line naming the rest.
func quote(body, key string) string {
	if len(body) <= quoteMax {
		return body
	}
	head := body[:strings.LastIndexByte(body[:quoteMax], '\n')+1]
	return fmt.Sprintf("%s[… %d more lines: see message %s]\n", head, strings.Count(body[len(head):], "\n"), key)
}

// noteOps plan debit notes as rows: the same note is the same recipient and text; a note
// that no longer stands is withdrawn by a note naming the claim it withdraws.
func (s debitNotesStep) noteOps(a *runner.Attempt) rowOps[outbox.Message] {
	return rowOps[outbox.Message]{
		key:      func(m outbox.Message) string { return m.Key },
		reverses: func(m outbox.Message) string { return m.Reverses },
		withKey:  func(m outbox.Message, k string) outbox.Message { m.Key = k; return m },
		same: func(x, y outbox.Message) bool {
			return slices.Equal(x.To, y.To) && x.Subject == y.Subject && x.Body == y.Body
		},
		reversal: func(m outbox.Message) outbox.Message {
			subject := "Withdrawn: " + m.Subject
			what := "message"
			if m.Kind == "debit" {
				what = "claim"
			}
			body := fmt.Sprintf("This withdraws our %[1]s %[2]s (%[3]s), sent for run %[4]s.\n"+
				"The run was corrected or undone; any %[1]s that stands is sent separately.\n\n"+
				"The withdrawn %[1]s was:\n\n%[5]s", what, m.Key, m.Subject, a.RunID, quote(m.Body, m.Key))
			w := s.message(a, "withdraw", m.Key+":withdraw", m.To[0], subject, body)
			w.To = m.To
			w.Reverses = m.Key
			return w
		},
	}
}

// Verify checks every note is on the outbox.
func (s debitNotesStep) Verify(ctx context.Context, a *runner.Attempt, r *runner.Result) error {
	var out noteOutput
	if err := unmarshal(ctx, a, r.Output, &out); err != nil {
		return err
	}
	keys := make([]string, len(out.Notes))
	for i, n := range out.Notes {
		keys[i] = n.Key
	}
	return queuedAll(ctx, a, append(keys, out.Withdrawn...))
}

// queuedAll checks that every key is on the run's outbox.
func queuedAll(ctx context.Context, a *runner.Attempt, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	msgs, err := supervisor.Queued(ctx, a.JS(), assets.Default, outboxTrust(a), a.RunID)
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
	var invoices, lines int
	var parked []recon.Parked
	if err := readFields(ctx, a, Extract, fields{
		"invoices": each(func(inv recon.Invoice) error { invoices, lines = invoices+1, lines+len(inv.Lines); return nil }),
		"parked":   into(&parked),
	}); err != nil {
		return nil, err
	}
	adjs, err := adjustments(ctx, a)
	if err != nil {
		return nil, err
	}
	rep := recon.SummarizeCounts(invoices, lines, adjs, parked)
	key := genKey(a.RunID+":report", a.Generation)
	subject, body := recon.ReportText(a.RunID, WarehouseOf(a.Params), DateOf(a.Params), rep)
	m := debitNotesStep(s).message(a, "report", key, s.e.FinanceTo, subject, body)
	if err := keyed(ctx, a, mailEffects(a, []outbox.Message{m}, debitNotesStep(s).noteOps(a)), func(int) error {
		return outbox.Queue(ctx, a.JS(), m, outbox.SignedBy(a.Signer()))
	}); err != nil {
		return nil, err
	}
	return result(ctx, a, reportOutput{Keys: []string{key}, Report: rep}, 1, "deliver the report of "+a.RunID)
}

// Verify checks the report is on the outbox.
func (s reportStep) Verify(ctx context.Context, a *runner.Attempt, r *runner.Result) error {
	var out reportOutput
	if err := unmarshal(ctx, a, r.Output, &out); err != nil {
		return err
	}
	return queuedAll(ctx, a, out.Keys)
}

// outboxTrust is what the step checks a run's outbox against: a forged message is never
// taken for a note that stands, nor for one of its own.
func outboxTrust(a *runner.Attempt) *outbox.Trust {
	if ring := a.Ring(); ring != nil {
		return &outbox.Trust{Ring: ring}
	}
	return nil
}
