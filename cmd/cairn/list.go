package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// untrusted is the status `cairn runs` gives a record that does not decode: its sum does
// not match, it is not a record at all, or it carries another epoch than the bucket's.
const untrusted = "untrusted"

// newerSchema is the status of a record a newer release of Cairn wrote (a rolling upgrade):
// nothing wrong with it, but this release cannot read it.
const newerSchema = "newer_schema"

// runRow is one line of `cairn runs`, and with --json one object per line.
type runRow struct {
	Pipeline   string `json:"pipeline"`
	RunID      string `json:"run_id"`
	Status     string `json:"status"`
	Step       string `json:"step"`        // the current step, "-" when every step is verified
	StepNumber int    `json:"step_number"` // n of "step n of N"
	Steps      int    `json:"steps"`       // N
	CreatedAt  string `json:"created_at"`
	Age        string `json:"age"`
	Restarts   int    `json:"restarts"`
	Generation int    `json:"generation"`
	NextAction string `json:"next_action"`
	Reason     string `json:"reason,omitempty"` // why an untrusted record is not trusted
	created    time.Time

	// ProgressedAt is when the run last made progress and Idle how long ago (only for a run
	// the stall timeouts judge); WaitingSince is when a run waiting for approval began to wait.
	ProgressedAt string `json:"progressed_at,omitempty"`
	Idle         string `json:"idle,omitempty"`
	WaitingSince string `json:"waiting_since,omitempty"`
}

// cmdRuns lists every run in cairn-runs, oldest first.
func cmdRuns(ctx context.Context, args []string) error { return runRuns(ctx, os.Stdout, args) }

// runRuns is cairn runs, printing to out.
func runRuns(ctx context.Context, out io.Writer, args []string) error {
	fs := flag.NewFlagSet("runs", flag.ContinueOnError)
	statusFlag := fs.String("status", "", "only runs with one of these statuses (comma-separated; "+untrusted+" for records that do not decode)")
	stepFlag := fs.String("step", "", "only runs whose current step is STEP (- for runs with every step verified)")
	raw := fs.Bool("json", false, "print one JSON object per run and line")
	only := fs.String("pipeline", "", "only the runs of pipeline NAME (default: the reference night's and every registered pipeline's)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return fmt.Errorf("%w: runs [--status S[,S]] [--step STEP] [--pipeline NAME] [--json] takes no arguments, got %q", errUsage, pos)
	}
	statuses, err := parseStatuses(*statusFlag)
	if err != nil {
		return err
	}
	if *stepFlag != "" && *stepFlag != "-" {
		if err := events.ValidID("step", *stepFlag); err != nil {
			return fmt.Errorf("%w: --step: %v", errUsage, err)
		}
	}
	_, nc, js, err := connect("cli")
	if err != nil {
		return err
	}
	defer nc.Close()
	pipes, err := openPipelines(ctx, js, *only)
	if err != nil {
		return err
	}
	var rows []runRow
	for _, p := range pipes {
		some, err := listRuns(ctx, p.store, time.Now())
		if err != nil {
			return err
		}
		for i := range some {
			some[i].Pipeline = p.name
		}
		rows = append(rows, some...)
	}
	sortRuns(rows)
	rows = slices.DeleteFunc(rows, func(r runRow) bool {
		return (len(statuses) > 0 && !slices.Contains(statuses, r.Status)) || (*stepFlag != "" && r.Step != *stepFlag)
	})
	if *raw {
		enc := json.NewEncoder(out)
		for _, r := range rows {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	if len(rows) == 0 {
		if len(statuses) == 0 && *stepFlag == "" {
			fmt.Fprintln(out, "no runs")
		} else {
			fmt.Fprintln(out, "no runs match")
		}
		return nil
	}
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	// The pipeline's column shows when the runs are of more than one.
	several := slices.ContainsFunc(rows, func(r runRow) bool { return r.Pipeline != rows[0].Pipeline })
	if several {
		fmt.Fprint(tw, "PIPELINE\t")
	}
	fmt.Fprintln(tw, "RUN\tSTATUS\tSTEP\tAGE\tIDLE\tRESTARTS\tGEN\tNEXT ACTION")
	for _, r := range rows {
		step, next := r.Step, r.NextAction
		switch {
		case r.Status == untrusted || r.Status == newerSchema:
			next = r.Reason
		case r.Step != "-":
			step = fmt.Sprintf("%s (%d/%d)", r.Step, r.StepNumber, r.Steps)
		}
		if several {
			fmt.Fprint(tw, r.Pipeline+"\t")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", r.RunID, r.Status, step, r.Age, cmp.Or(r.Idle, "-"), r.Restarts, r.Generation, cutRunes(next, 72))
	}
	return tw.Flush()
}

// parseStatuses splits --status and refuses a status no run can have.
func parseStatuses(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	known := []string{string(kc.Running), string(kc.WaitingApproval), string(kc.Finishing), string(kc.HandedOver),
		string(kc.Done), string(kc.Undoing), string(kc.Undone), string(kc.Cancelled), untrusted}
	var out []string
	for _, v := range strings.Split(s, ",") {
		v = strings.TrimSpace(v)
		if !slices.Contains(known, v) {
			return nil, fmt.Errorf("%w: --status %q: a status is one of %s", errUsage, v, strings.Join(known, ", "))
		}
		out = append(out, v)
	}
	return out, nil
}

// listRuns reads the latest record of every run (one watch over the bucket, no read per key)
// (unsorted: sortRuns). A record that does not decode is listed as untrusted
// with the reason, never skipped.
func listRuns(ctx context.Context, store *kc.Store, now time.Time) ([]runRow, error) {
	w, err := store.KV().WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", assets.BucketRuns, err)
	}
	defer func() { _ = w.Stop() }()
	var rows []runRow
	for e := range w.Updates() {
		if e == nil {
			break // every key's latest value has been delivered
		}
		rows = append(rows, runRowOf(ctx, store, e, now))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return rows, nil
}

// sortRuns sorts rows by created_at, then pipeline and run id; a record without a readable
// created_at sorts last.
func sortRuns(rows []runRow) {
	slices.SortFunc(rows, func(a, b runRow) int {
		return cmp.Or(boolOrder(a.created.IsZero(), b.created.IsZero()), a.created.Compare(b.created), cmp.Compare(a.Pipeline, b.Pipeline), cmp.Compare(a.RunID, b.RunID))
	})
}

// boolOrder sorts false before true.
func boolOrder(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// runRowOf is the row of the record stored under key.
// A record that fails the store's checks (its sum, its invariants, its epoch, its
// signature) is shown, not read.
func runRowOf(ctx context.Context, store *kc.Store, e jetstream.KeyValueEntry, now time.Time) runRow {
	key, value := e.Key(), e.Value()
	r, err := store.DecodeEntry(ctx, key, value, e.Revision())
	if err != nil {
		// What can still be read helps a person find the run; none of it is trusted.
		var loose struct {
			CreatedAt string `json:"created_at"`
		}
		_ = json.Unmarshal(value, &loose)
		row := runRow{RunID: key, Status: untrusted, Step: "-", CreatedAt: loose.CreatedAt, Reason: err.Error()}
		if errors.Is(err, kc.ErrNewerSchema) {
			row.Status = newerSchema
		}
		row.created, row.Age = age(loose.CreatedAt, now)
		return row
	}
	verified := 0
	for _, s := range r.Pipeline {
		if r.Step(s).Status == kc.Verified {
			verified++
		}
	}
	row := runRow{
		RunID: r.RunID, Status: string(r.Status), Step: inHand(r),
		StepNumber: min(verified+1, len(r.Pipeline)), Steps: len(r.Pipeline), CreatedAt: r.CreatedAt,
		Restarts: r.Restarts, Generation: r.Generation, NextAction: r.NextAction,
	}
	row.created, row.Age = age(r.CreatedAt, now)
	row.ProgressedAt = r.ProgressedAt
	switch r.Status {
	case kc.Running, kc.Finishing, kc.Undoing, kc.WaitingApproval: // what the stall timeouts judge
		_, row.Idle = age(r.ProgressedAt, now)
	}
	if a := r.Approval; a != nil && r.Status == kc.WaitingApproval {
		row.WaitingSince = a.Since
	}
	return row
}

// age parses an RFC 3339 time and says how long ago it was: 45s, 3m, 2h, 4d ("-" when the
// time does not parse).
func age(at string, now time.Time) (time.Time, string) {
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return time.Time{}, "-"
	}
	d := max(now.Sub(t), 0)
	switch {
	case d < time.Minute:
		return t, fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return t, fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return t, fmt.Sprintf("%dh", int(d/time.Hour))
	}
	return t, fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

// cutRunes shortens s to at most n runes, marking the cut.
func cutRunes(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
