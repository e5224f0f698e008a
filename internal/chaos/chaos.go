// Package chaos crashes the reference night at every step boundary and at sampled writes,
// restarts it, and compares each night with an uninterrupted one (`cairn chaos`).
//
// Each night runs in a folder of its own: the generator's data, a `cairn dev` child process
// with a fault that exits it, the start, the restart, and the outcome: every ledger row,
// stock adjustment and stock level, the outbox keys, every mail (its Date header aside), the
// report's output, and the extractor calls and document reads of the timeline.
package chaos

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/devproc"
	"github.com/cairnhq/cairn/internal/night"
	"github.com/cairnhq/cairn/internal/recon"
	"github.com/cairnhq/cairn/pkg/artifacts"
	"github.com/cairnhq/cairn/pkg/assets"
	pchaos "github.com/cairnhq/cairn/pkg/chaos"
	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/faults"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/outbox"
	"github.com/cairnhq/cairn/pkg/supervisor"

	"github.com/cairnhq/cairn/internal/sqlitefile"
	_ "modernc.org/sqlite"
)

// The reference night.
const (
	Warehouse = "ldh"
	Date      = "2026-10-13"
	RunID     = "run-2026-10-13-ldh"
)

// Outcome is everything a finished night left that a crash must not change.
type Outcome struct {
	Ledger, Stock, Levels []string
	Outbox                []string // outbox keys, sorted, repeats kept
	Mail                  []string // every .eml: its name, then the message without its Date header
	Report                string
	ExtractorCalls        int
	DocumentReads         int
}

// Result is one crash night against the reference.
type Result struct {
	Fault       string        `json:"fault"`
	Fired       bool          `json:"fired"`
	Resumed     []string      `json:"resumed"` // the steps the restart ran
	Duplicates  int           `json:"duplicates"`
	Differences []string      `json:"differences"`
	ExtraCalls  int           `json:"extra_extractor_calls"`
	Took        time.Duration `json:"took_ns"`
}

// Night runs the reference night in dir (emptied first) with bin as `cairn dev`.
type Night struct {
	Bin   string
	Dir   string
	Truth recon.Truth
	// Undo: once the night is done, the whole run is undone (cairn undo RUN), and the night
	// ends when it is undone. The compensator's crash points crash that undo.
	Undo bool
	url  string
}

// UndoPoint reports whether a crash point is the compensator's: its night is undone.
func UndoPoint(fault string) bool { return strings.HasPrefix(fault, undoStep+".") }

const undoStep = "undo" // the compensator's lease step, and its faults' step name

// Prepare generates the night's data in a fresh dir.
func Prepare(ctx context.Context, bin, dir string) (*Night, error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	truth, err := recon.Generate(ctx, recon.GenConfig{Warehouse: Warehouse, Date: Date, Invoices: 312, Mismatches: 40, Seed: 1,
		InboxDir: filepath.Join(dir, "inbox"), ERPPath: filepath.Join(dir, "erp.db"), TruthDir: filepath.Join(dir, "truth")})
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return &Night{Bin: bin, Dir: dir, Truth: truth, url: fmt.Sprintf("nats://127.0.0.1:%d", port)}, nil
}

func (n *Night) dev(i int, fault string) (*devproc.Proc, error) {
	env := append(os.Environ(), "CAIRN_DATA_DIR="+n.Dir, "CAIRN_NATS_URL="+n.url, "CAIRN_HEARTBEAT=1s", "CAIRN_LEASE=5s", "CAIRN_ACK_WAIT=10s")
	if fault != "" {
		env = append(env, "CAIRN_FAULTS="+fault)
	}
	return devproc.Start(n.Bin, env, filepath.Join(n.Dir, fmt.Sprintf("dev-%d.log", i)), time.Minute)
}

// Run runs the night with fault ("" for none): a crash, the restart, until done (or undone,
// for an undo night), then the outcome. limit bounds each phase.
func (n *Night) Run(ctx context.Context, fault string, limit time.Duration) (Outcome, Result, error) {
	res := Result{Fault: fault}
	began := time.Now()
	p, err := n.dev(1, fault)
	if err != nil {
		return Outcome{}, res, err
	}
	if err := n.start(ctx); err != nil {
		p.Stop(10 * time.Second)
		return Outcome{}, res, err
	}
	if n.Undo {
		if err := n.undo(ctx, limit); err != nil {
			p.Stop(10 * time.Second)
			return Outcome{}, res, fmt.Errorf("%s: %w; log %s", fault, err, p.Log)
		}
	}
	if fault != "" {
		code, err := p.Wait(limit)
		if err != nil || code != faults.ExitCode {
			p.Stop(10 * time.Second)
			return Outcome{}, res, fmt.Errorf("%s: cairn dev ended with %d (%v), want the fault's exit %d; log %s", fault, code, err, faults.ExitCode, p.Log)
		}
		res.Fired = faults.Fired(filepath.Join(n.Dir, "faults"), fault)
		if p, err = n.dev(2, fault); err != nil {
			return Outcome{}, res, err
		}
	}
	defer p.Stop(20 * time.Second)
	nc, err := nats.Connect(n.url)
	if err != nil {
		return Outcome{}, res, err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	want := kc.Done
	if n.Undo {
		want = kc.Undone
	}
	rec, err := WaitStatus(ctx, js, RunID, want, limit)
	if err != nil {
		return Outcome{}, res, fmt.Errorf("%s: %w; log %s", fault, err, p.Log)
	}
	res.Took = time.Since(began)
	o, resumed, err := n.outcome(ctx, js, rec)
	res.Resumed = resumed
	return o, res, err
}

// undo waits until the night is done, then asks for the undo of the whole run.
func (n *Night) undo(ctx context.Context, limit time.Duration) error {
	nc, err := nats.Connect(n.url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := WaitDone(ctx, js, RunID, limit); err != nil {
		return err
	}
	_, err = js.Publish(ctx, events.RunSubject(RunID, events.VerbUndo), []byte(`{"request_id":"chaos-undo"}`))
	return err
}

func (n *Night) start(ctx context.Context) error {
	nc, err := nats.Connect(n.url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	_, err = js.Publish(ctx, events.RunStartSubject, fmt.Appendf(nil, `{"run_id":%q,"warehouse":%q,"date":%q}`, RunID, Warehouse, Date))
	return err
}

// WaitDone watches run's checkpoint until it is done (a handed-over or cancelled run is an
// error), for at most limit.
func WaitDone(ctx context.Context, js jetstream.JetStream, run string, limit time.Duration) (*kc.Record, error) {
	return WaitStatus(ctx, js, run, kc.Done, limit)
}

// WaitStatus watches run's checkpoint until its status is want (a handed-over or cancelled
// run is an error), for at most limit.
func WaitStatus(ctx context.Context, js jetstream.JetStream, run string, want kc.Status, limit time.Duration) (*kc.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	store, err := night.OpenRuns(ctx, js)
	if err != nil {
		return nil, err
	}
	w, err := store.KV().Watch(ctx, run)
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }()
	for e := range w.Updates() {
		if e == nil || e.Operation() != jetstream.KeyValuePut {
			continue
		}
		// Through the services' checks: a damaged record ends the wait with why.
		r, err := store.DecodeEntry(ctx, e.Key(), e.Value(), e.Revision())
		if err != nil {
			return nil, fmt.Errorf("run %s: the checkpoint (revision %d) is damaged: %w", run, e.Revision(), err)
		}
		switch r.Status {
		case want:
			return r, nil
		case kc.HandedOver, kc.Cancelled:
			return r, fmt.Errorf("run %s is %s: %s", run, r.Status, r.NextAction)
		}
	}
	return nil, fmt.Errorf("run %s not %s within %s", run, want, limit)
}

// outcome reads what the finished run left, and the steps started after the crash.
func (n *Night) outcome(ctx context.Context, js jetstream.JetStream, rec *kc.Record) (Outcome, []string, error) {
	var o Outcome
	var err error
	if o.Ledger, err = column(ctx, filepath.Join(n.Dir, "ledger.db"), `SELECT key||' '||run_id||' '||invoice_no||' '||line||' '||kind||' '||supplier_id||' '||
		amount_paise||' '||coalesce(reverses, '-') FROM ledger_entries ORDER BY key`); err != nil {
		return o, nil, err
	}
	erp := filepath.Join(n.Dir, "erp.db")
	if o.Stock, err = column(ctx, erp, `SELECT key||' '||run_id||' '||warehouse||' '||sku||' '||supplier_id||' '||qty_delta||' '||
		value_delta_paise||' '||reason||' '||coalesce(reverses, '-') FROM stock_adjustments ORDER BY key`); err != nil {
		return o, nil, err
	}
	if o.Levels, err = column(ctx, erp, `SELECT warehouse||' '||sku||' '||qty||' '||value_paise FROM stock_levels ORDER BY warehouse, sku`); err != nil {
		return o, nil, err
	}
	msgs, err := supervisor.Queued(ctx, js, assets.Default, nil, RunID)
	if err != nil {
		return o, nil, err
	}
	for _, m := range msgs {
		o.Outbox = append(o.Outbox, m.Key)
	}
	slices.Sort(o.Outbox)
	o.Outbox = slices.Compact(o.Outbox) // a restart's copy of a message is stored beside the dead attempt's
	if o.Mail, err = MailFiles(filepath.Join(n.Dir, "mail")); err != nil {
		return o, nil, err
	}
	store, err := artifacts.Open(ctx, js, assets.ObjectArtifacts)
	if err != nil {
		return o, nil, err
	}
	b, err := store.Load(ctx, rec.Step("report").Output)
	if err != nil {
		return o, nil, err
	}
	o.Report = string(b)
	evs, err := events.ReadSubject(ctx, js, assets.StreamAudit, events.AuditSubject(RunID))
	if err != nil {
		return o, nil, err
	}
	resumed := map[string]bool{}
	crashed := false
	var crashedAt time.Time
	for _, e := range evs {
		var a events.Audit
		if e.Unmarshal(&a) != nil {
			continue
		}
		switch a.Event {
		case "extractor.called":
			o.ExtractorCalls++
		case "document.read":
			o.DocumentReads++
		case "reassigned":
			if !crashed {
				crashedAt = e.Time
			}
			crashed = true
		case "step.started", "step.verified":
			if crashed {
				resumed[a.Step] = true
			}
		}
	}
	// A lease-free step's commit is in the record alone (it audits neither start nor commit).
	for _, s := range rec.Pipeline {
		st := rec.Step(s)
		if !crashed || st.Status != kc.Verified || st.FinishedAt == nil {
			continue
		}
		if at, err := time.Parse(time.RFC3339Nano, *st.FinishedAt); err == nil && at.After(crashedAt) {
			resumed[s] = true
		}
	}
	var steps []string
	for _, s := range rec.Pipeline {
		if resumed[s] {
			steps = append(steps, s)
		}
	}
	return o, steps, nil
}

func column(ctx context.Context, path, query string) ([]string, error) {
	if err := sqlitefile.Private(path); err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// MailFiles reads the mail folder: each .eml's name, then the message without its Date
// header (the run's start, which differs from night to night); a hidden temporary file is
// not mail, and a folder (shadow/) is listed by name.
func MailFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		switch {
		case strings.HasPrefix(e.Name(), "."):
		case e.IsDir():
			out = append(out, e.Name()+"/")
		default:
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				return nil, err
			}
			head, body, _ := bytes.Cut(b, []byte("\r\n\r\n"))
			var kept []string
			for _, h := range strings.Split(string(head), "\r\n") {
				if !strings.HasPrefix(h, "Date: ") {
					kept = append(kept, h)
				}
			}
			out = append(out, e.Name()+"\n"+strings.Join(kept, "\n")+"\n\n"+string(body))
		}
	}
	return out, nil
}

// Compare names every difference between a night and the reference, and counts the rows and
// messages that exist more often than in the reference.
func Compare(got, want Outcome) (diffs []string, duplicates int) {
	add := func(what string, g, w []string) {
		d, dup := pchaos.Diff(what, g, w)
		diffs = append(diffs, d...)
		duplicates += dup
	}
	add("ledger", got.Ledger, want.Ledger)
	add("stock adjustment", got.Stock, want.Stock)
	add("stock level", got.Levels, want.Levels)
	add("outbox key", got.Outbox, want.Outbox)
	add("mail", got.Mail, want.Mail)
	if got.Report != want.Report {
		diffs = append(diffs, fmt.Sprintf("report output %s, want %s", got.Report, want.Report))
	}
	if got.ExtractorCalls != want.ExtractorCalls {
		diffs = append(diffs, fmt.Sprintf("extractor calls %d, want %d", got.ExtractorCalls, want.ExtractorCalls))
	}
	if got.DocumentReads != want.DocumentReads {
		diffs = append(diffs, fmt.Sprintf("document reads %d, want %d", got.DocumentReads, want.DocumentReads))
	}
	return diffs, duplicates
}

// Points are the crash points: every step boundary (before and after its commit, and before
// its next event's publish), the first, 24th and last entry of post-ledger and update-stock
// and the first, middle and last note of debit-notes, before and after the write; the
// supervisor's, after it recorded the start; the outbox sender's first, middle and last
// delivery (the notes and the report), before it and after it (handed over, not yet marked
// sent); and the compensator's, in an undo of the whole night: the first, middle and last
// reversal, and before and after the undo's commit.
func Points(t recon.Truth, steps []string) []string {
	out := []string{supervisor.FaultPoint + "." + faults.AfterRecord + "=exit@once"}
	for _, s := range steps {
		out = append(out, s+"."+faults.BeforeCommit+"=exit@once", s+"."+faults.AfterCommit+"=exit@once")
		if s != steps[len(steps)-1] {
			out = append(out, s+"."+faults.BeforeNextPublish+"=exit@once")
		}
	}
	entries, notes := len(t.Adjustments), len(t.DebitNotes)
	for _, w := range []struct {
		step string
		ns   []int
	}{{"post-ledger", []int{1, 24, entries}}, {"update-stock", []int{1, 24, entries}}, {"debit-notes", []int{1, (notes + 1) / 2, notes}}} {
		for _, point := range []string{faults.BeforeWrite, faults.AfterWrite} {
			for _, n := range w.ns {
				out = append(out, fmt.Sprintf("%s.%s.%d=exit@once", w.step, point, n))
			}
		}
	}
	mails := notes + 1 // and the report
	for _, point := range []string{faults.BeforeDeliver, faults.AfterDeliver} {
		for _, n := range []int{1, (mails + 1) / 2, mails} {
			out = append(out, fmt.Sprintf("%s.%s.%d=exit@once", outbox.FaultStep, point, n))
		}
	}
	effects := 2*entries + notes + 1 // every entry and adjustment, every note, the report
	out = append(out,
		fmt.Sprintf("%s.%s.1=exit@once", undoStep, faults.BeforeWrite),
		fmt.Sprintf("%s.%s.%d=exit@once", undoStep, faults.AfterWrite, (effects+1)/2),
		fmt.Sprintf("%s.%s.%d=exit@once", undoStep, faults.BeforeWrite, effects),
		undoStep+"."+faults.BeforeCommit+"=exit@once",
		undoStep+"."+faults.AfterCommit+"=exit@once")
	return out
}

// Expected adjusts the reference for a crash point where a difference is inherent: a crash
// before fetch's commit loads every document again (fetch had saved nothing).
func Expected(ref Outcome, fault string) Outcome {
	if strings.HasPrefix(fault, "fetch."+faults.BeforeCommit+"=") {
		ref.DocumentReads *= 2
	}
	return ref
}
