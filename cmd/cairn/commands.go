package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/cairnhq/cairn/internal/handover"
	"github.com/cairnhq/cairn/internal/night"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/pipeline"
)

// cmdHandovers lists the runs handed to a person, with their notes.
func cmdHandovers(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("handovers", flag.ContinueOnError)
	raw := fs.Bool("json", false, "print the notes as JSON, one per line")
	all := fs.Bool("all", false, "also list notes of runs that have been resumed since")
	if err := fs.Parse(args); err != nil {
		return err
	}
	_, nc, js, err := connect("cli")
	if err != nil {
		return err
	}
	defer nc.Close()
	notes, err := js.KeyValue(ctx, assets.BucketHandovers)
	if err != nil {
		return err
	}
	store, err := openRuns(ctx, js)
	if err != nil {
		return err
	}
	lister, err := notes.ListKeys(ctx)
	if err != nil {
		return err
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	if !*raw {
		fmt.Fprintln(tw, "RUN\tSTEP\tSTATUS\tAT\tKEYS DONE\tERROR")
	}
	for _, k := range keys {
		e, err := notes.Get(ctx, k)
		if err != nil {
			continue // deleted in between
		}
		var n handover.Note
		if err := json.Unmarshal(e.Value(), &n); err != nil {
			fmt.Fprintf(os.Stderr, "handover note %s is unreadable: %v\n", k, err)
			continue
		}
		status := "unknown"
		if rec, _, err := store.Load(ctx, k); err == nil {
			status = string(rec.Status)
			if !*all && (rec.Handover == nil || *rec.Handover != n.ID) {
				continue // the run went on since: the note is history
			}
		} else if errors.Is(err, kc.ErrCorrupt) || errors.Is(err, kc.ErrForeignEpoch) {
			status = "record not trusted"
		} else if errors.Is(err, kc.ErrNewerSchema) {
			status = "record of a newer release"
		}
		if *raw {
			fmt.Println(string(e.Value()))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", n.RunID, n.Step, status, n.At, n.Done.Keys, n.Error)
	}
	return tw.Flush()
}

// printNote prints the run's handover note, for status.
func printNote(ctx context.Context, out io.Writer, js jetstream.JetStream, sp assets.Space, runID string) {
	notes, err := js.KeyValue(ctx, sp.Bucket(assets.BucketHandovers))
	if err != nil {
		return
	}
	e, err := notes.Get(ctx, runID)
	if err != nil {
		return
	}
	var n handover.Note
	if json.Unmarshal(e.Value(), &n) != nil {
		return
	}
	fmt.Fprintf(out, "handover note %s (%s)\n  step    %s\n  error   %s\n  done    %d keys, %d messages\n",
		n.ID, n.At, n.Step, n.Error, n.Done.Keys, n.Done.Messages)
	printDone(out, n.Done)
	fmt.Fprintf(out, "  next    %s\n", n.NextAction)
}

// printDone shows what each step had done when the run stopped: a verified step's keys and
// messages as its record says, the stopped step's read back with the keys that stand (the
// first handover.MaxStanding of them, and where to list them all).
func printDone(out io.Writer, d handover.Done) {
	for _, s := range d.Steps {
		line := fmt.Sprintf("    %-13s %d keys, %d messages", s.Step, s.Keys, s.Messages)
		switch {
		case s.ReadBack:
			line += ", read back when it stopped"
		case s.Counted > 0:
			line += fmt.Sprintf("; %d made durable at the loop guard's last count (not read back)", s.Counted)
		case s.Keys+s.Messages > 0:
			line += " (verified; its output lists them)"
		}
		if s.Next != "" {
			line += "; not yet done: " + s.Next
		}
		fmt.Fprintln(out, line)
		for _, k := range s.Standing {
			fmt.Fprintf(out, "      stands  %s\n", k)
		}
		if s.Where != "" && s.Keys+s.Messages > 0 {
			more := ""
			if n := s.Keys + s.Messages - len(s.Standing); n > 0 {
				more = fmt.Sprintf("%d more; ", n)
			}
			fmt.Fprintf(out, "      %slist them all: %s\n", more, s.Where)
		}
	}
}

// verbSpec is one run command of the CLI: what it sends and which runs may take it.
type verbSpec struct {
	verb  string
	usage string
	may   func(*kc.Record) error
}

var (
	resumeSpec = verbSpec{events.VerbResume, "resume RUN [--after-fix] [--wait] | resume --where QUERY [--yes]", func(r *kc.Record) error {
		if r.Status != kc.HandedOver && r.Status != kc.Cancelled {
			return fmt.Errorf("run %s is %s: only a handed-over or cancelled run can be resumed", r.RunID, r.Status)
		}
		return nil
	}}
	cancelSpec = verbSpec{events.VerbCancel, "cancel RUN | cancel --where QUERY [--yes]", func(r *kc.Record) error {
		switch r.Status {
		case kc.Running, kc.WaitingApproval, kc.HandedOver:
			return nil
		}
		return fmt.Errorf("run %s is %s: there is nothing to cancel", r.RunID, r.Status)
	}}
	rerunSpec = verbSpec{events.VerbRerun, "rerun RUN --from STEP [--wait] | rerun --where QUERY --from STEP [--yes]", func(r *kc.Record) error {
		switch r.Status {
		case kc.Done, kc.HandedOver, kc.Cancelled:
			return nil
		}
		return fmt.Errorf("run %s is %s: only a done, handed-over or cancelled run can be run again", r.RunID, r.Status)
	}}

	undoSpec = verbSpec{events.VerbUndo, "undo RUN [--supplier ID] [--step STEP] [--wait] | undo --where QUERY [--supplier ID] [--step STEP] [--yes]", func(r *kc.Record) error {
		if r.Status == kc.Undoing {
			return fmt.Errorf("run %s is being undone already", r.RunID)
		}
		return nil
	}}
)

var (
	approveSpec = verbSpec{events.VerbApprove, "approve RUN [--by NAME] [--seed FILE] [--wait] [--pipeline NAME] | approve --where QUERY [--pipeline NAME] [--yes]", func(r *kc.Record) error {
		if r.Status == kc.WaitingApproval || (r.Status == kc.Running && r.Approval != nil && r.Approval.By != nil) {
			return nil
		}
		return fmt.Errorf("run %s is %s: it waits for no approval", r.RunID, r.Status)
	}}
	rejectSpec = verbSpec{events.VerbReject, "reject RUN [--pipeline NAME] | reject --where QUERY [--pipeline NAME] [--yes]", func(r *kc.Record) error {
		if r.Status != kc.WaitingApproval {
			return fmt.Errorf("run %s is %s: it waits for no approval", r.RunID, r.Status)
		}
		return nil
	}}
)

// cmdApprove lets a run that waits on a plan go on: the reference night's, or with --pipeline
// a registered pipeline's, whose record gives the plan signed and whose subject takes it.
func cmdApprove(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("approve", flag.ContinueOnError)
	by := fs.String("by", os.Getenv("USER"), "who approves: an approver registered with cairn approver add (recorded in the checkpoint)")
	seed := fs.String("seed", os.Getenv("CAIRN_APPROVER_SEED_FILE"), "the file of the approver's seed, which signs the approval (default $CAIRN_APPROVER_SEED_FILE)")
	return runVerb(ctx, fs, args, approveSpec, func() events.Command { return events.Command{By: *by} }, func(r *kc.Record, c *events.Command) error {
		return signApproval(r, c, *seed)
	})
}

// cmdReject refuses a waiting plan (the night's, or with --pipeline a registered
// pipeline's): the run is undone.
func cmdReject(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("reject", flag.ContinueOnError)
	return runVerb(ctx, fs, args, rejectSpec, func() events.Command { return events.Command{} })
}

func cmdUndo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("undo", flag.ContinueOnError)
	supplier := fs.String("supplier", "", "undo only this supplier's entries, stock adjustments and debit note (--attr supplier=ID)")
	step := fs.String("step", "", "undo only this step's effects")
	where := attrFlags{}
	fs.Var(where, "attr", "undo only the effects whose saga attribute has this value, ATTR=VALUE (repeatable: every pair must match)")
	return runVerb(ctx, fs, args, undoSpec, func() events.Command {
		c := events.Command{}
		if *supplier != "" {
			where[night.AttrSupplier] = *supplier
		}
		if len(where) > 0 || *step != "" {
			c.Scope = &events.UndoScope{Step: *step}
			if len(where) > 0 {
				c.Scope.Where = where
			}
		}
		return c
	})
}

func cmdResume(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("resume", flag.ContinueOnError)
	afterFix := fs.Bool("after-fix", false, "the cause was fixed (for example a corrected invoice): accept the new source and run again the steps whose inputs changed")
	return runVerb(ctx, fs, args, resumeSpec, func() events.Command { return events.Command{AfterFix: *afterFix} })
}

func cmdCancel(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("cancel", flag.ContinueOnError)
	return runVerb(ctx, fs, args, cancelSpec, func() events.Command { return events.Command{} })
}

func cmdRerun(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("rerun", flag.ContinueOnError)
	from := fs.String("from", "", "the step to run again from (required); the earlier steps' outputs are kept")
	return runVerb(ctx, fs, args, rerunSpec, func() events.Command { return events.Command{From: *from} })
}

// runVerb sends one run command to RUN, or with --where to every run the query matches
// (after a confirmation unless --yes), printing what it did run by run.
func runVerb(ctx context.Context, fs *flag.FlagSet, args []string, spec verbSpec, cmd func() events.Command, sign ...func(*kc.Record, *events.Command) error) error {
	where := fs.String("where", "", "act on every run matching QUERY: comma-separated key=value with keys status, step (the current step), warehouse, date")
	yes := fs.Bool("yes", false, "with --where: do not ask for confirmation")
	wait := fs.Bool("wait", false, "follow the run until it is done; exit 3 when it is handed over")
	only := fs.String("pipeline", "", "the runs' pipeline (default: the reference night)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	c := cmd()
	if spec.verb == events.VerbRerun && c.From == "" {
		return fmt.Errorf("%w: --from STEP is required (%s)", errUsage, spec.usage)
	}
	if *where == "" && len(pos) != 1 {
		return fmt.Errorf("%w: %s", errUsage, spec.usage)
	}
	if *where != "" && (len(pos) != 0 || *wait) {
		return fmt.Errorf("%w: --where takes no run id and no --wait (%s)", errUsage, spec.usage)
	}
	var q query
	if *where != "" {
		if q, err = parseQuery(*where); err != nil {
			return fmt.Errorf("%w: --where: %v", errUsage, err)
		}
	}
	s, err := newSender(ctx, *only)
	if err != nil {
		return err
	}
	defer s.close()
	if len(sign) > 0 {
		s.sign = sign[0]
	}
	if *where == "" {
		return s.send(ctx, pos[0], spec, c, *wait)
	}
	runs, err := s.matching(ctx, q)
	if err != nil {
		return err
	}
	if len(runs) == 0 {
		fmt.Printf("no run matches %s\n", *where)
		return nil
	}
	fmt.Printf("%s: %d runs match %s\n", spec.verb, len(runs), *where)
	for _, r := range runs {
		fmt.Printf("  %s\n", progress(r))
	}
	if !*yes && !confirm(fmt.Sprintf("%s these %d runs?", spec.verb, len(runs))) {
		return errors.New("nothing done: not confirmed (use --yes to skip the question)")
	}
	failed := 0
	for _, r := range runs {
		fmt.Printf("%s %s: ", spec.verb, r.RunID)
		if err := s.send(ctx, r.RunID, spec, c, false); err != nil {
			fmt.Printf("failed: %v\n", err)
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%s failed for %d of %d runs", spec.verb, failed, len(runs))
	}
	return nil
}

// confirm asks on the terminal; anything but y or yes is a no.
func confirm(question string) bool {
	fmt.Printf("%s [y/N] ", question)
	var answer string
	_, _ = fmt.Scanln(&answer)
	return answer == "y" || answer == "Y" || answer == "yes"
}

// query is a parsed --where: every key must match.
type query map[string]string

func parseQuery(s string) (query, error) {
	q := query{}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || v == "" {
			return nil, fmt.Errorf("%q is not key=value", part)
		}
		switch k {
		case "status", "step", "warehouse", "date":
		default:
			return nil, fmt.Errorf("unknown key %q (status, step, warehouse, date)", k)
		}
		q[k] = v
	}
	return q, nil
}

func (q query) matches(r *kc.Record) bool {
	for k, v := range q {
		var got string
		switch k {
		case "status":
			got = string(r.Status)
		case "step":
			got = r.Current()
			if r.Status == kc.HandedOver || r.Status == kc.Cancelled {
				got = stoppedStep(r)
			}
		case "warehouse":
			got = night.WarehouseOf(r.Params)
		case "date":
			got = night.DateOf(r.Params)
		}
		if got != v {
			return false
		}
	}
	return true
}

// stoppedStep is the step a stopped run stopped at: its first step not verified.
func stoppedStep(r *kc.Record) string {
	for _, name := range r.Pipeline {
		if r.Step(name).Status != kc.Verified {
			return name
		}
	}
	return ""
}

// sender publishes run commands and waits for the supervisor's answer.
type sender struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	store *kc.Store
	space assets.Space                            // the pipeline's: its command and refusal subjects
	def   pipeline.Definition                     // the pipeline's (a registered one's has no code: no RunID, no CheckInput)
	sign  func(*kc.Record, *events.Command) error // signs a command for the record it acts on; may be nil
}

// newSender sends commands to the runs of pipeline name (the reference night's when "").
func newSender(ctx context.Context, name string) (*sender, error) {
	_, nc, js, err := connect("cli")
	if err != nil {
		return nil, err
	}
	p, err := openOne(ctx, js, name)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &sender{nc: nc, js: js, store: p.store, space: p.space, def: p.def}, nil
}

func (s *sender) close() { s.nc.Close() }

// runs is the sender's pipeline's runs, for follow.
func (s *sender) runs() pipelineRuns {
	return pipelineRuns{name: s.def.Name, space: s.space, store: s.store, def: s.def}
}

// matching lists the runs q matches, oldest first.
func (s *sender) matching(ctx context.Context, q query) ([]*kc.Record, error) {
	lister, err := s.store.KV().ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var out []*kc.Record
	for k := range lister.Keys() {
		r, _, err := s.store.Load(ctx, k)
		if err != nil {
			continue // deleted in between, or not trusted: never acted on in bulk
		}
		if q.matches(r) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *kc.Record) int { return strings.Compare(a.CreatedAt, b.CreatedAt) })
	return out, nil
}

// send checks that the run may take the command, publishes it, and waits until the
// supervisor applied it (its request id is in the record) or refused it (cairn.rejected).
func (s *sender) send(ctx context.Context, runID string, spec verbSpec, c events.Command, wait bool) error {
	if err := events.ValidID("run id", runID); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	rec, _, err := s.store.Load(ctx, runID)
	if errors.Is(err, kc.ErrNotFound) {
		return fmt.Errorf("no run %q", runID)
	}
	if err != nil {
		return err
	}
	if err := spec.may(rec); err != nil {
		return err
	}
	if s.sign != nil {
		if err := s.sign(rec, &c); err != nil {
			return err
		}
	}
	typ, _ := events.CommandType(spec.verb)
	c.RequestID = "cli-" + nuid.Next()
	e, err := events.New(c.RequestID, typ, "/cairn/cli", runID, time.Now(), c)
	if err != nil {
		return err
	}
	m, err := events.Encode(s.space.Run(runID, spec.verb), e)
	if err != nil {
		return err
	}
	rejected := make(chan *nats.Msg, 16)
	sub, err := s.nc.ChanSubscribe(s.space.Rejected(), rejected)
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	w, err := s.store.KV().Watch(ctx, runID, jetstream.UpdatesOnly())
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	if _, err := s.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("publishing %s (is the supervisor running?): %w", spec.verb, err)
	}
	limit := time.NewTimer(30 * time.Second)
	defer limit.Stop()
	waiting := false
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-limit.C:
			return fmt.Errorf("%s of %s sent (request %s) but not applied within 30s: is the supervisor running?", spec.verb, runID, c.RequestID)
		case rm := <-rejected:
			if reason, ours := rejectionOf(rm, c.RequestID); ours {
				return fmt.Errorf("%s of %s refused: %s", spec.verb, runID, reason)
			}
		case e := <-w.Updates():
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			r, err := decodeEntry(ctx, s.store, e)
			if err != nil {
				return err
			}
			if !r.HasRequest(c.RequestID) {
				switch {
				case r.Waiting(c.RequestID) != nil && !waiting:
					// Accepted: it waits in the record for the run's lease, however long.
					waiting = true
					limit.Stop()
					fmt.Printf("%s  %s  %s waits for the run's lease (request %s)\n", r.RunID, r.Status, spec.verb, c.RequestID)
					if !wait {
						return nil
					}
				case waiting && r.Waiting(c.RequestID) == nil:
					// Its wait ended without it: a handover named it, or the run moved on.
					fmt.Println(progress(r))
					if r.Status == kc.HandedOver {
						return exitCode{code: 3, err: fmt.Errorf("%s of %s was handed over before it could be carried out: %s", spec.verb, runID, r.NextAction)}
					}
					return fmt.Errorf("%s of %s no longer applies: the run is %s", spec.verb, runID, r.Status)
				}
				continue
			}
			fmt.Println(progress(r))
			switch {
			case !wait:
				return nil
			case spec.verb == events.VerbUndo:
				return followUndo(ctx, s.store, w, c.RequestID, r)
			default:
				return follow(ctx, os.Stdout, s.js, s.runs(), runID)
			}
		}
	}
}

// rejectionOf reports whether a message on cairn.rejected refuses the command with id.
func rejectionOf(m *nats.Msg, id string) (string, bool) {
	e, err := events.Decode(m)
	if err != nil {
		return "", false
	}
	var r events.Rejected
	if e.Unmarshal(&r) != nil {
		return "", false
	}
	for k, v := range r.Headers {
		if (k == "ce-id" || k == "Ce-Id") && slices.Contains(v, id) {
			return r.Reason, true
		}
	}
	return "", false
}

// parseArgs parses flags given before or after the positional arguments
// (`cairn resume RUN --wait` as well as `cairn resume --wait RUN`) and returns the positionals.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// followUndo prints an undo's progress until it is finished.
func followUndo(ctx context.Context, store *kc.Store, w jetstream.KeyWatcher, id string, r *kc.Record) error {
	for {
		if r.Undo != nil && r.Undo.RequestID == kc.RequestKey(id) {
			fmt.Printf("%s  %s  %d of %d effects, %d reversed\n", r.RunID, r.Status, r.Undo.Cursor, r.Undo.Total, r.Undo.Reversed)
			if r.Status != kc.Undoing {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e := <-w.Updates():
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			next, err := decodeEntry(ctx, store, e)
			if err != nil {
				return err
			}
			r = next
		}
	}
}

// attrFlags collects repeated ATTR=VALUE flags.
type attrFlags map[string]string

func (a attrFlags) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(a)) {
		parts = append(parts, k+"="+a[k])
	}
	return strings.Join(parts, ",")
}

func (a attrFlags) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" || val == "" {
		return fmt.Errorf("%q is not ATTR=VALUE", v)
	}
	if old, dup := a[k]; dup && old != val {
		return fmt.Errorf("attribute %s given twice (%s, %s)", k, old, val)
	}
	a[k] = val
	return nil
}
