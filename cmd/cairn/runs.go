package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/cairnhq/cairn/internal/night"
	"github.com/cairnhq/cairn/internal/recon"
	"github.com/cairnhq/cairn/internal/service"
	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/identity"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/outbox"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/saga"
	"github.com/cairnhq/cairn/pkg/supervisor"
)

func cmdGen(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	wh := fs.String("warehouse", "ldh", "warehouse code")
	date := fs.String("date", "2026-10-13", "night's date, YYYY-MM-DD")
	inv := fs.Int("invoices", 312, "readable invoices")
	mis := fs.Int("mismatches", 40, "mismatching lines")
	unr := fs.Int("unreadable", 0, "extra invoices nobody can read")
	seed := fs.Int64("seed", 1, "random seed")
	out := fs.String("out", "", "acts as CAIRN_DATA_DIR")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := service.Load()
	if err != nil {
		return err
	}
	// The ERP rows go where CAIRN_ERP_DSN points, SQLite or PostgreSQL; --out puts every
	// file, a SQLite ERP among them, in one folder.
	inbox, erp, truth := c.InboxDir, string(c.ERPDSN), filepath.Join(c.DataDir, "truth")
	if *out != "" {
		inbox, erp, truth = filepath.Join(*out, "inbox"), filepath.Join(*out, "erp.db"), filepath.Join(*out, "truth")
	}
	t, err := recon.Generate(ctx, recon.GenConfig{Warehouse: *wh, Date: *date, Invoices: *inv, Mismatches: *mis,
		Unreadable: *unr, Seed: *seed, InboxDir: inbox, ERPPath: erp, TruthDir: truth})
	if err != nil {
		return err
	}
	fmt.Printf("generated %d invoices (%d unreadable), %d mismatches, %d debit notes for %s %s\n",
		t.Invoices+len(t.Parked), len(t.Parked), len(t.Adjustments), len(t.DebitNotes), *wh, *date)
	return nil
}

func cmdStart(ctx context.Context, args []string) error { return runStart(ctx, os.Stdout, args) }

// runStart is cairn start, printing to out: a run of the reference night (--warehouse,
// --date) or of a registered pipeline (--pipeline, its input by --input and --json).
func runStart(ctx context.Context, out io.Writer, args []string) error {
	fs := flag.NewFlagSet("start", flag.ContinueOnError)
	wh := fs.String("warehouse", "", "the night's warehouse code (required without --pipeline)")
	date := fs.String("date", "", "the night's date, YYYY-MM-DD (required without --pipeline)")
	only := fs.String("pipeline", "", "start a run of this registered pipeline (default: the reference night)")
	members := inputFlags{}
	fs.Var(members, "input", "with --pipeline: a member of the run's input, KEY=VALUE, the value a string (repeatable)")
	raw := fs.String("json", "", `with --pipeline: the run's input as a JSON object, '{"source":"records.jsonl"}' (with --input: both, no member twice)`)
	runID := fs.String("run-id", "", "run id (default: the night's run-<date>-<warehouse>, a pipeline's run-<16 hex of its input>)")
	shadow := fs.Bool("shadow", false, "a shadow run: the night writes to the shadow tables and mail folder")
	wait := fs.Bool("wait", false, "follow the run until it is done; exit 3 when it is handed over")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return fmt.Errorf("%w: start takes no arguments, got %q (--input KEY=VALUE gives a pipeline's input)", errUsage, pos)
	}
	cmd := events.StartCommand{RequestID: "cli-" + nuid.Next(), RunID: *runID, Shadow: *shadow}
	hosted := *only != "" && *only != night.Pipeline.Name
	if hosted {
		if *wh != "" || *date != "" {
			return fmt.Errorf("%w: --warehouse and --date are the night's; pipeline %s takes its input by --input KEY=VALUE or --json", errUsage, *only)
		}
		if cmd.Params, err = members.with(*raw); err != nil {
			return fmt.Errorf("%w: start: %v", errUsage, err)
		}
	} else {
		if len(members) > 0 || *raw != "" {
			return fmt.Errorf("%w: the night takes --warehouse and --date, not --input or --json (those are a hosted pipeline's, with --pipeline)", errUsage)
		}
		cmd.Params = kc.StringParams(false, night.ParamWarehouse, *wh, night.ParamDate, *date).Input
		if err := night.CheckInput(cmd.Params); err != nil {
			return fmt.Errorf("%w: start: %v", errUsage, err)
		}
	}
	if err := cmd.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	name := "" // the night's
	if hosted {
		name = *only
	}
	s, err := newSender(ctx, name)
	if err != nil {
		return err
	}
	defer s.close()
	return s.start(ctx, out, cmd, *wait)
}

// startLimit bounds how long cairn start waits for the supervisor's answer.
const startLimit = 30 * time.Second

// start sends a start and waits for the supervisor's answer (app.StartIn): the run's record
// made by this start, or the refusal (the run id exists with other parameters, or another
// run has this input already: the refusal names it, and cairn start exits 1). The same start
// of an existing run makes no second one; it says so.
func (s *sender) start(ctx context.Context, out io.Writer, cmd events.StartCommand, wait bool) error {
	if cmd.RunID == "" {
		cmd.RunID = s.def.DefaultRunID(cmd.Params)
	}
	run := cmd.RunID
	actx, cancel := context.WithTimeout(ctx, startLimit)
	defer cancel()
	started, err := app.StartIn(actx, s.js, s.space, "/cairn/cli", cmd)
	switch {
	case errors.Is(err, kc.ErrCorrupt), errors.Is(err, kc.ErrForeignEpoch), errors.Is(err, kc.ErrInvariant):
		return exitCode{code: 3, err: fmt.Errorf("%w: not started (cairn status %s --json shows the record raw)", err, run)}
	case errors.Is(err, kc.ErrNewerSchema):
		return exitCode{code: 3, err: fmt.Errorf("%w: use the newer release's cairn", err)}
	case errors.Is(err, app.ErrNoAnswer) && ctx.Err() == nil:
		return fmt.Errorf("start of %s sent (request %s) but not answered within %s: is the supervisor running?", run, cmd.RequestID, startLimit)
	case err != nil:
		return err
	}
	if started.Again {
		fmt.Fprintf(out, "run %s exists already (%s): the same start makes one run\n", run, started.Record.Status)
	} else {
		fmt.Fprintf(out, "started %s\n", run)
	}
	if !wait {
		return nil
	}
	return follow(ctx, out, s.js, s.runs(), run)
}

// inputFlags collects a hosted pipeline's input members, KEY=VALUE (cairn start --input).
type inputFlags map[string]string

func (f inputFlags) String() string { return attrFlags(f).String() }

func (f inputFlags) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not KEY=VALUE", v)
	}
	if _, dup := f[k]; dup {
		return fmt.Errorf("member %s given twice", k)
	}
	f[k] = val
	return nil
}

// with is the input: f's members, each a JSON string, and those of the JSON object raw.
func (f inputFlags) with(raw string) (map[string]json.RawMessage, error) {
	input := map[string]json.RawMessage{}
	if raw != "" {
		if err := json.Unmarshal([]byte(raw), &input); err != nil || input == nil {
			return nil, fmt.Errorf("--json is not a JSON object: %s", raw)
		}
	}
	for k, v := range f {
		if _, dup := input[k]; dup {
			return nil, fmt.Errorf("member %s given by both --input and --json", k)
		}
		input[k], _ = json.Marshal(v)
	}
	for _, k := range []string{"run_id", "request_id", "shadow"} {
		if _, ok := input[k]; ok {
			return nil, fmt.Errorf("%s is the framework's member, not the input's (--run-id, --shadow)", k)
		}
	}
	return input, nil
}

// follow prints the run's progress until it is done or handed over: a line per step, and
// every half second the items done within the step (documents read, answers, writes) as the
// timeline and the saga records tell them.
func follow(ctx context.Context, out io.Writer, js jetstream.JetStream, p pipelineRuns, run string) error {
	store, sp := p.store, p.space
	w, err := store.KV().Watch(ctx, run)
	if err != nil {
		return err
	}
	defer w.Stop()
	items := make(chan string, 1024) // the step of each item done
	for _, subject := range []string{sp.Audit(run), sp.Saga(run, ">")} {
		sub, err := js.Conn().Subscribe(subject, func(m *nats.Msg) {
			if step := itemStep(m); step != "" {
				select {
				case items <- step:
				default: // a slow terminal loses a count, never blocks the connection
				}
			}
		})
		if err != nil {
			return err
		}
		defer func() { _ = sub.Unsubscribe() }()
	}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	done := map[string]int{}
	shown := map[string]int{}
	current, last := "", ""
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case step := <-items:
			done[step]++
		case <-tick.C:
			if current != "" && done[current] != shown[current] {
				shown[current] = done[current]
				fmt.Fprintf(out, "%s  %s: %d items done\n", run, current, done[current])
			}
		case e := <-w.Updates():
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			r, err := decodeEntry(ctx, store, e)
			if err != nil {
				return err
			}
			current = r.Current()
			if line := progress(r); line != last {
				fmt.Fprintln(out, line)
				last = line
			}
			switch r.Status {
			case kc.Done:
				return nil
			case kc.HandedOver, kc.Cancelled:
				return exitCode{code: 3, err: fmt.Errorf("run %s is %s: %s", run, r.Status, r.NextAction)}
			}
		}
	}
}

// itemStep is the step of an item event (a document read, a model answer, an outside write
// done), "" for anything else.
func itemStep(m *nats.Msg) string {
	e, err := events.Decode(m)
	if err != nil {
		return ""
	}
	switch e.Type {
	case events.TypeAudit:
		var a events.Audit
		if e.Unmarshal(&a) == nil && a.Item != "" && a.Event != "outbox.dropped" {
			return a.Step
		}
	case events.TypeSaga:
		var r saga.Record
		if json.Unmarshal(e.Data, &r) == nil && r.Phase == saga.Outcome {
			return r.Step
		}
	}
	return ""
}

func progress(r *kc.Record) string {
	done := 0
	for _, s := range r.Pipeline {
		if r.Step(s).Status == kc.Verified {
			done++
		}
	}
	cur := inHand(r)
	return fmt.Sprintf("%s  %-9s step %d of %d (%s)  %s", r.RunID, r.Status, min(done+1, len(r.Pipeline)), len(r.Pipeline), cur, r.NextAction)
}

// inHand names the step a run waits on, or the steps, when several run side by side; "-"
// when none is left.
func inHand(r *kc.Record) string {
	if ready := r.Ready(); len(ready) > 1 {
		return strings.Join(ready, ",")
	}
	return cmp.Or(r.Current(), "-")
}

func cmdStatus(ctx context.Context, args []string) error { return runStatus(ctx, os.Stdout, args) }

// runStatus is cairn status, printing to out.
func runStatus(ctx context.Context, out io.Writer, args []string) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	raw := fs.Bool("json", false, "print the raw checkpoint record")
	only := fs.String("pipeline", "", "the run's pipeline (default: the reference night)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: status RUN [--pipeline NAME] [--json]", errUsage)
	}
	run := pos[0]
	_, nc, js, err := connect("cli")
	if err != nil {
		return err
	}
	defer nc.Close()
	p, err := openOne(ctx, js, *only)
	if err != nil {
		return err
	}
	store, sp := p.store, p.space
	e, err := store.KV().Get(ctx, run)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("no run %q", run)
	}
	if err != nil {
		return err
	}
	if *raw {
		fmt.Fprintln(out, string(e.Value()))
		return nil
	}
	r, err := store.DecodeEntry(ctx, run, e.Value(), e.Revision())
	if errors.Is(err, kc.ErrNewerSchema) {
		return fmt.Errorf("run %s: %w: use the newer release's cairn (or --json for the raw record)", run, err)
	}
	if err != nil {
		fmt.Fprintf(out, "run %s: the checkpoint (revision %d) is damaged, not trusted: %v\n", run, e.Revision(), err)
		printNote(ctx, out, js, sp, run)
		return exitCode{code: 3, err: fmt.Errorf("checkpoint of %s not trusted", run)}
	}
	printRecord(out, r, e.Revision(), p.def)
	if r.Status == kc.Finishing || (r.Status == kc.HandedOver && r.Current() == "") {
		printUndelivered(ctx, out, js, sp, r)
	}
	if r.Handover != nil {
		printNote(ctx, out, js, sp, r.RunID)
	}
	return nil
}

// printUndelivered shows the mail a finishing run waits on: each message not yet marked sent
// or cancelled, and what its mark says.
func printUndelivered(ctx context.Context, out io.Writer, js jetstream.JetStream, sp assets.Space, r *kc.Record) {
	marks, err := js.KeyValue(ctx, sp.Bucket(assets.BucketOutbox))
	if err != nil {
		fmt.Fprintf(out, "outbox     unknown: %v\n", err)
		return
	}
	// What the sender would send: a forged message (refused on cairn.rejected) is not waited on.
	var trust *outbox.Trust
	if ring, err := identity.OpenRing(ctx, js, sp); err == nil {
		trust = &outbox.Trust{Ring: ring}
	}
	pending, queued, err := supervisor.Undelivered(ctx, js, sp, trust, marks, r)
	if err != nil {
		fmt.Fprintf(out, "outbox     unknown: %v\n", err)
		return
	}
	fmt.Fprintf(out, "outbox     %d undelivered of %d queued\n", len(pending), queued)
	for _, p := range pending {
		what := "queued, not yet taken"
		switch p.Mark {
		case outbox.Sending:
			what = "being delivered, or retried until the relay takes it"
		case outbox.Refused:
			what = "refused for good: fix the cause, then cairn resume " + r.RunID
		}
		fmt.Fprintf(out, "  %-40s %s\n", p.Message.Key, what)
	}
}

// printRecord prints a run's record; def is its pipeline's, whose input it names in order.
func printRecord(out io.Writer, r *kc.Record, rev uint64, def pipeline.Definition) {
	fmt.Fprintf(out, "run        %s (revision %d, written %s, last progress %s)\nparams     %s\nstatus     %s\nrestarts   %d   generation %d\nnext       %s\n",
		r.RunID, rev, r.UpdatedAt, r.ProgressedAt, inputText(def, r.Params), r.Status, r.Restarts, r.Generation, r.NextAction)
	if r.Lease != nil {
		fmt.Fprintf(out, "lease      %s, step %s, token %d\n", r.Lease.Owner, r.Lease.Step, r.Lease.Token)
	}
	if r.Handover != nil {
		fmt.Fprintf(out, "handover   %s\n", *r.Handover)
	}
	for _, c := range r.Commands {
		fmt.Fprintf(out, "waiting    %s %s, asked by %s at %s: for the run's lease\n", c.Verb, c.RequestID, c.By, c.At)
	}
	if a := r.Approval; a != nil {
		who := "not yet approved: cairn approve " + r.RunID + " or cairn reject " + r.RunID
		if a.By != nil {
			who = "approved by " + *a.By
			if a.At != nil {
				who += " at " + *a.At
			}
		}
		fmt.Fprintf(out, "approval   step %s, plan %s, asked for at %s, %s\n", a.Step, a.PlanDigest, a.Since, who)
	}
	printCode(out, r)
	fmt.Fprintln(out, "steps:")
	for i, name := range r.Pipeline {
		s := r.Step(name)
		line := fmt.Sprintf("  %d. %-13s %-11s attempts %d", i+1, name, s.Status, s.Attempts)
		if s.Effects != nil {
			line += fmt.Sprintf(", %d keys", s.Effects.Keys)
		}
		if s.ParkedCount > 0 {
			line += fmt.Sprintf(", %d parked", s.ParkedCount)
		}
		line += stepFacts(r, s)
		if s.LastError != nil {
			line += ", last error: " + *s.LastError
		}
		fmt.Fprintln(out, line)
	}
}

// inputText is a run's input in a line, its pipeline's members in their declared order, then
// the others sorted: "warehouse ldh, date 2026-10-13, shadow false" for the night,
// "source records.jsonl, shadow false" for a run of enrich. A string is shown as it is, any
// other value as its JSON.
func inputText(def pipeline.Definition, p kc.Params) string {
	var parts []string
	names := slices.Clone(def.Input)
	for _, k := range p.Names() {
		if !slices.Contains(names, k) {
			names = append(names, k)
		}
	}
	for _, k := range names {
		v, ok := p.Input[k]
		if !ok {
			continue
		}
		text := string(v)
		var str string
		if json.Unmarshal(v, &str) == nil {
			text = str
		} else {
			var c bytes.Buffer
			if json.Compact(&c, v) == nil {
				text = c.String()
			}
		}
		parts = append(parts, k+" "+text)
	}
	return strings.Join(append(parts, fmt.Sprintf("shadow %t", p.Shadow)), ", ")
}
