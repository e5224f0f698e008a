package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
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
	store, err := kc.Open(ctx, js, assets.BucketRuns)
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
		var n runner.HandoverNote
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
func printNote(ctx context.Context, js jetstream.JetStream, runID string) {
	notes, err := js.KeyValue(ctx, assets.BucketHandovers)
	if err != nil {
		return
	}
	e, err := notes.Get(ctx, runID)
	if err != nil {
		return
	}
	var n runner.HandoverNote
	if json.Unmarshal(e.Value(), &n) != nil {
		return
	}
	fmt.Printf("handover note %s (%s)\n  step    %s\n  error   %s\n  done    %d keys, %d messages\n  next    %s\n",
		n.ID, n.At, n.Step, n.Error, n.Done.Keys, n.Done.Messages, n.NextAction)
}

func cmdResume(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("resume", flag.ContinueOnError)
	afterFix := fs.Bool("after-fix", false, "the cause was fixed (for example a corrected invoice): accept the new source and run again the steps whose inputs changed")
	wait := fs.Bool("wait", false, "follow the run until it is done; exit 3 when it is handed over again")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: resume RUN [--after-fix] [--wait]", errUsage)
	}
	return runCommand(ctx, pos[0], events.VerbResume, events.Command{AfterFix: *afterFix}, *wait,
		func(r *kc.Record) error {
			if r.Status != kc.HandedOver && r.Status != kc.Cancelled {
				return fmt.Errorf("run %s is %s: only a handed-over or cancelled run can be resumed", r.RunID, r.Status)
			}
			return nil
		})
}

func cmdCancel(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("cancel", flag.ContinueOnError)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: cancel RUN", errUsage)
	}
	return runCommand(ctx, pos[0], events.VerbCancel, events.Command{}, false, func(r *kc.Record) error {
		switch r.Status {
		case kc.Running, kc.WaitingApproval, kc.HandedOver:
			return nil
		}
		return fmt.Errorf("run %s is %s: there is nothing to cancel", r.RunID, r.Status)
	})
}

// runCommand checks that the run may take the command, publishes it, and waits until the
// supervisor applied it (its request id is in the record) or refused it (cairn.rejected).
func runCommand(ctx context.Context, runID, verb string, c events.Command, wait bool, may func(*kc.Record) error) error {
	if err := events.ValidID("run id", runID); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	_, nc, js, err := connect("cli")
	if err != nil {
		return err
	}
	defer nc.Close()
	store, err := kc.Open(ctx, js, assets.BucketRuns)
	if err != nil {
		return err
	}
	rec, _, err := store.Load(ctx, runID)
	if errors.Is(err, kc.ErrNotFound) {
		return fmt.Errorf("no run %q", runID)
	}
	if err != nil {
		return err
	}
	if err := may(rec); err != nil {
		return err
	}
	typ, _ := events.CommandType(verb)
	c.RequestID = "cli-" + nuid.Next()
	e, err := events.New(c.RequestID, typ, "/cairn/cli", runID, time.Now(), c)
	if err != nil {
		return err
	}
	m, err := events.Encode(events.RunSubject(runID, verb), e)
	if err != nil {
		return err
	}
	rejected := make(chan *nats.Msg, 16)
	sub, err := nc.ChanSubscribe(events.RejectedSubject, rejected)
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	w, err := store.KV().Watch(ctx, runID, jetstream.UpdatesOnly())
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	if _, err := js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("publishing %s (is the supervisor running?): %w", verb, err)
	}
	limit := time.NewTimer(30 * time.Second)
	defer limit.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-limit.C:
			return fmt.Errorf("%s of %s sent (request %s) but not applied within 30s: is the supervisor running?", verb, runID, c.RequestID)
		case rm := <-rejected:
			if reason, ours := rejectionOf(rm, c.RequestID); ours {
				return fmt.Errorf("%s of %s refused: %s", verb, runID, reason)
			}
		case e := <-w.Updates():
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			r, err := kc.Decode(e.Value())
			if err != nil || !r.HasRequest(c.RequestID) {
				continue
			}
			fmt.Println(progress(r))
			if wait {
				return follow(ctx, js, runID)
			}
			return nil
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
