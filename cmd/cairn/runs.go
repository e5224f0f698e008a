package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/cairnhq/cairn/internal/night"
	"github.com/cairnhq/cairn/internal/recon"
	"github.com/cairnhq/cairn/internal/service"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/identity"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/outbox"
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

func cmdStart(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("start", flag.ContinueOnError)
	wh := fs.String("warehouse", "", "warehouse code (required)")
	date := fs.String("date", "", "night's date, YYYY-MM-DD (required)")
	runID := fs.String("run-id", "", "run id (default run-<date>-<warehouse>)")
	shadow := fs.Bool("shadow", false, "write to the shadow tables and mail folder")
	wait := fs.Bool("wait", false, "follow the run until it is done; exit 3 when it is handed over")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cmd := events.StartCommand{RequestID: "cli-" + nuid.Next(), RunID: *runID, Shadow: *shadow,
		Params: kc.StringParams(false, night.ParamWarehouse, *wh, night.ParamDate, *date).Input}
	if err := cmd.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if err := night.CheckInput(cmd.Params); err != nil {
		return fmt.Errorf("%w: start: %v", errUsage, err)
	}
	s, err := newSender(ctx, "")
	if err != nil {
		return err
	}
	defer s.close()
	return s.start(ctx, cmd, *wait)
}

// start publishes a start and waits for the supervisor's answer: the run's record made by
// this start, or its refusal on cairn.rejected (the run id exists with other parameters, or
// another run has this input already: the refusal names it, and cairn start exits 1). The
// same start of an existing run makes no second one; it says so.
func (s *sender) start(ctx context.Context, cmd events.StartCommand, wait bool) error {
	run := cmd.RunID
	if run == "" {
		run = night.Pipeline.DefaultRunID(cmd.Params)
	}
	params := kc.Params{Input: cmd.Params, Shadow: cmd.Shadow}
	existing, rev, err := s.store.Load(ctx, run)
	if err != nil && !errors.Is(err, kc.ErrNotFound) {
		if errors.Is(err, kc.ErrCorrupt) || errors.Is(err, kc.ErrForeignEpoch) || errors.Is(err, kc.ErrNewerSchema) {
			return damaged(run, rev, err)
		}
		return err
	}
	e, err := events.New(cmd.RequestID, events.TypeRunStart, "/cairn/cli", run, time.Now(), cmd)
	if err != nil {
		return err
	}
	m, err := events.Encode(events.RunStartSubject, e)
	if err != nil {
		return err
	}
	rejected := make(chan *nats.Msg, 16)
	sub, err := s.nc.ChanSubscribe(events.RejectedSubject, rejected)
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	w, err := s.store.KV().Watch(ctx, run, jetstream.UpdatesOnly())
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	if _, err := s.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("publishing the start (is cairn dev or the supervisor running?): %w", err)
	}
	again := func(r *kc.Record) error {
		fmt.Printf("run %s exists already (%s): the same start makes one run\n", run, r.Status)
		if !wait {
			return nil
		}
		return follow(ctx, s.js, run)
	}
	if existing != nil && existing.Params.Equal(params) {
		return again(existing) // the supervisor only sends a pending first step's event again
	}
	limit := time.NewTimer(30 * time.Second)
	defer limit.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-limit.C:
			if r, _, err := s.store.Load(ctx, run); err == nil && r.Params.Equal(params) {
				return again(r) // made in between by another start of the same run
			}
			return fmt.Errorf("start of %s sent (request %s) but not applied within 30s: is the supervisor running?", run, cmd.RequestID)
		case rm := <-rejected:
			if reason, ours := rejectionOf(rm, cmd.RequestID); ours {
				return fmt.Errorf("start of %s refused: %s", run, reason)
			}
		case e := <-w.Updates():
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			r, err := decodeEntry(ctx, s.store, e)
			if err != nil {
				return err
			}
			if !r.HasRequest(cmd.RequestID) {
				continue
			}
			fmt.Printf("started %s\n", run)
			if !wait {
				return nil
			}
			return follow(ctx, s.js, run)
		}
	}
}

// follow prints the run's progress until it is done or handed over: a line per step, and
// every half second the items done within the step (documents read, answers, writes) as the
// timeline and the saga records tell them.
func follow(ctx context.Context, js jetstream.JetStream, run string) error {
	store, err := openRuns(ctx, js)
	if err != nil {
		return err
	}
	w, err := store.KV().Watch(ctx, run)
	if err != nil {
		return err
	}
	defer w.Stop()
	items := make(chan string, 1024) // the step of each item done
	for _, subject := range []string{events.AuditSubject(run), "cairn.saga." + run + ".>"} {
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
				fmt.Printf("%s  %s: %d items done\n", run, current, done[current])
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
				fmt.Println(line)
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

func cmdStatus(ctx context.Context, args []string) error {
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
		fmt.Println(string(e.Value()))
		return nil
	}
	r, err := store.DecodeEntry(ctx, run, e.Value(), e.Revision())
	if errors.Is(err, kc.ErrNewerSchema) {
		return fmt.Errorf("run %s: %w: use the newer release's cairn (or --json for the raw record)", run, err)
	}
	if err != nil {
		fmt.Printf("run %s: the checkpoint (revision %d) is damaged, not trusted: %v\n", run, e.Revision(), err)
		printNote(ctx, js, sp, run)
		return exitCode{code: 3, err: fmt.Errorf("checkpoint of %s not trusted", run)}
	}
	printRecord(r, e.Revision())
	if r.Status == kc.Finishing || (r.Status == kc.HandedOver && r.Current() == "") {
		printUndelivered(ctx, js, sp, r)
	}
	if r.Handover != nil {
		printNote(ctx, js, sp, r.RunID)
	}
	return nil
}

// printUndelivered shows the mail a finishing run waits on: each message not yet marked sent
// or cancelled, and what its mark says.
func printUndelivered(ctx context.Context, js jetstream.JetStream, sp assets.Space, r *kc.Record) {
	marks, err := js.KeyValue(ctx, sp.Bucket(assets.BucketOutbox))
	if err != nil {
		fmt.Printf("outbox     unknown: %v\n", err)
		return
	}
	// What the sender would send: a forged message (refused on cairn.rejected) is not waited on.
	var trust *outbox.Trust
	if ring, err := identity.OpenRingIn(ctx, js, sp); err == nil {
		trust = &outbox.Trust{Ring: ring}
	}
	pending, queued, err := supervisor.Undelivered(ctx, js, sp, trust, marks, r)
	if err != nil {
		fmt.Printf("outbox     unknown: %v\n", err)
		return
	}
	fmt.Printf("outbox     %d undelivered of %d queued\n", len(pending), queued)
	for _, p := range pending {
		what := "queued, not yet taken"
		switch p.Mark {
		case outbox.Sending:
			what = "being delivered, or retried until the relay takes it"
		case outbox.Refused:
			what = "refused for good: fix the cause, then cairn resume " + r.RunID
		}
		fmt.Printf("  %-40s %s\n", p.Message.Key, what)
	}
}

func printRecord(r *kc.Record, rev uint64) {
	fmt.Printf("run        %s (revision %d, written %s, last progress %s)\nparams     warehouse %s, date %s, shadow %t\nstatus     %s\nrestarts   %d   generation %d\nnext       %s\n",
		r.RunID, rev, r.UpdatedAt, r.ProgressedAt, night.WarehouseOf(r.Params), night.DateOf(r.Params), r.Params.Shadow, r.Status, r.Restarts, r.Generation, r.NextAction)
	if r.Lease != nil {
		fmt.Printf("lease      %s, step %s, token %d\n", r.Lease.Owner, r.Lease.Step, r.Lease.Token)
	}
	if r.Handover != nil {
		fmt.Printf("handover   %s\n", *r.Handover)
	}
	for _, c := range r.Commands {
		fmt.Printf("waiting    %s %s, asked by %s at %s: for the run's lease\n", c.Verb, c.RequestID, c.By, c.At)
	}
	if a := r.Approval; a != nil {
		who := "not yet approved: cairn approve " + r.RunID + " or cairn reject " + r.RunID
		if a.By != nil {
			who = "approved by " + *a.By
			if a.At != nil {
				who += " at " + *a.At
			}
		}
		fmt.Printf("approval   step %s, plan %s, asked for at %s, %s\n", a.Step, a.PlanDigest, a.Since, who)
	}
	printCode(r)
	fmt.Println("steps:")
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
		fmt.Println(line)
	}
}
