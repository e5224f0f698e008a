package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// Audit event kinds the timeline folds into its step rows; every other kind is listed with
// its time among the run's events.
const (
	evStarted        = "step.started"
	evVerified       = "step.verified"
	evFailed         = "step.failed"
	evFenced         = "fenced"
	evHandover       = "handover"
	evReassigned     = "reassigned"
	evRepublished    = "republished"
	evVersionChanged = "version.changed"
)

// timeline is what `cairn timeline RUN --json` prints: one object.
type timeline struct {
	RunID  string         `json:"run_id"`
	Count  int            `json:"audit_events"`
	Steps  []stepTimeline `json:"steps"`
	Events []runEvent     `json:"events"`
}

// stepTimeline sums up one step's audit events.
type stepTimeline struct {
	Step string `json:"step"`
	// After are the steps it waits for, when the run's steps do not simply run one after
	// another (its record's after); absent otherwise.
	After      []string   `json:"after,omitempty"`
	StartedAt  *time.Time `json:"started_at"`  // the first step.started
	FinishedAt *time.Time `json:"finished_at"` // the last step.verified
	// Started counts step.started; Attempts counts the attempts seen by their token, which
	// includes a lease-free step's (it audits no start, only its end).
	Started        int            `json:"started"`
	Attempts       int            `json:"attempts"`
	Restarts       int            `json:"restarts"` // starts after the step's lease was reassigned
	Verified       int            `json:"verified"`
	Failed         int            `json:"failed"`
	Fenced         int            `json:"fenced"`
	Handovers      int            `json:"handovers"`
	Reassigned     int            `json:"reassigned"`
	Republished    int            `json:"republished"`
	VersionChanges int            `json:"version_changes"`
	Items          map[string]int `json:"items"` // item events by kind: extractor.called, document.read ...
	tokens         map[uint64]bool
	reassignedOpen bool
}

// runEvent is one line of the run's events: everything but a step's routine start, commit
// and item events.
type runEvent struct {
	At     time.Time         `json:"at"`
	Event  string            `json:"event"`
	Step   string            `json:"step,omitempty"`
	Token  uint64            `json:"token,omitempty"`
	Owner  string            `json:"owner,omitempty"`
	Detail string            `json:"detail,omitempty"`
	Attrs  map[string]string `json:"attrs,omitempty"`
}

// cmdTimeline prints a run's timeline from CAIRN_AUDIT and the run's record (the commits that
// are their record alone).
func cmdTimeline(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("timeline", flag.ContinueOnError)
	raw := fs.Bool("json", false, "print the timeline as one JSON object")
	only := fs.String("pipeline", "", "the run's pipeline (default: the reference night)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: timeline RUN [--pipeline NAME] [--json]", errUsage)
	}
	run := pos[0]
	if err := events.ValidID("run id", run); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	_, nc, js, err := connect("cli")
	if err != nil {
		return err
	}
	defer nc.Close()
	// The record gives the pipeline's order; without a trusted one, steps come in the order
	// the audit first names them.
	var trusted *kc.Record
	p, err := openOne(ctx, js, *only)
	if err != nil {
		return err
	}
	store := p.store
	rec, _, lerr := store.Load(ctx, run)
	switch {
	case lerr == nil:
		trusted = rec
	case errors.Is(lerr, kc.ErrNotFound):
	case errors.Is(lerr, kc.ErrCorrupt), errors.Is(lerr, kc.ErrForeignEpoch):
		fmt.Fprintf(os.Stderr, "cairn timeline: the checkpoint of %s is not trusted (%v); steps in the order the audit names them\n", run, lerr)
	case errors.Is(lerr, kc.ErrNewerSchema):
		fmt.Fprintf(os.Stderr, "cairn timeline: %v (the newer release's cairn reads it); steps in the order the audit names them\n", lerr)
	default:
		return lerr
	}
	evs, err := events.ReadSubject(ctx, js, p.space.Stream(assets.StreamAudit), p.space.Audit(run))
	if err != nil {
		return err
	}
	if len(evs) == 0 && errors.Is(lerr, kc.ErrNotFound) {
		return fmt.Errorf("no run %q: no checkpoint and no audit event", run)
	}
	tl, err := buildTimeline(run, trusted, evs)
	if err != nil {
		return err
	}
	if *raw {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(tl)
	}
	printTimeline(tl)
	return nil
}

// buildTimeline folds the run's audit events, in stream order, into step rows (in pipeline
// order, then any other step in the order the audit names it) and the run's events. rec is
// the run's trusted record, or nil: it gives the pipeline's order, and the commits that are
// their record alone (a lease-free step's that counted no outside effect publishes no
// step.verified): a verified step whose token no step.verified names is verified at its
// finished_at.
func buildTimeline(run string, rec *kc.Record, evs []events.Event) (timeline, error) {
	var pipeline []string
	if rec != nil {
		pipeline = rec.Pipeline
	}
	tl := timeline{RunID: run, Count: len(evs), Steps: []stepTimeline{}, Events: []runEvent{}}
	verified := map[string]map[uint64]bool{} // the tokens of each step's step.verified events
	index := map[string]int{}
	row := func(step string) *stepTimeline {
		i, ok := index[step]
		if !ok {
			i = len(tl.Steps)
			index[step] = i
			tl.Steps = append(tl.Steps, stepTimeline{Step: step, Items: map[string]int{}, tokens: map[uint64]bool{}})
		}
		return &tl.Steps[i]
	}
	for _, s := range pipeline {
		r := row(s)
		if rec.After != nil {
			r.After = append([]string{}, rec.Deps(s)...)
		}
	}
	for _, e := range evs {
		var a events.Audit
		if err := e.Unmarshal(&a); err != nil {
			return tl, fmt.Errorf("audit event %s of %s: %w", e.ID, run, err)
		}
		at := e.Time
		if a.Event != evStarted && a.Event != evVerified && a.Item == "" {
			tl.Events = append(tl.Events, runEvent{At: at, Event: a.Event, Step: a.Step, Token: a.Token, Owner: a.Owner, Detail: a.Detail, Attrs: a.Attrs})
		}
		// run.* events name the step they act on (a resume's, a rerun's) but are not the step's.
		if a.Step == "" || strings.HasPrefix(a.Event, "run.") {
			continue
		}
		s := row(a.Step)
		if a.Token != 0 && a.Event != evReassigned {
			s.tokens[a.Token] = true // reassigned names the dead attempt's token, seen already
		}
		if a.Item != "" {
			s.Items[a.Event]++
			continue
		}
		switch a.Event {
		case evStarted:
			s.Started++
			if s.StartedAt == nil {
				s.StartedAt = &at
			}
			if s.reassignedOpen {
				s.Restarts++
				s.reassignedOpen = false
			}
		case evVerified:
			s.Verified++
			s.FinishedAt = &at
			if verified[a.Step] == nil {
				verified[a.Step] = map[uint64]bool{}
			}
			verified[a.Step][a.Token] = true
		case evFailed:
			s.Failed++
		case evFenced:
			s.Fenced++
		case evHandover:
			s.Handovers++
		case evReassigned:
			s.Reassigned++
			s.reassignedOpen = true
		case evRepublished:
			s.Republished++
		case evVersionChanged:
			s.VersionChanges++
		}
	}
	if rec != nil {
		for _, name := range rec.Pipeline {
			st := rec.Step(name)
			if st.Status != kc.Verified || st.Token == nil || st.FinishedAt == nil || verified[name][*st.Token] {
				continue
			}
			at, err := time.Parse(time.RFC3339Nano, *st.FinishedAt)
			if err != nil {
				return tl, fmt.Errorf("step %s of %s: finished_at %q: %w", name, run, *st.FinishedAt, err)
			}
			s := row(name)
			if s.StartedAt == nil && st.StartedAt != nil { // a lease-free step audits no start
				if began, err := time.Parse(time.RFC3339Nano, *st.StartedAt); err == nil {
					s.StartedAt = &began
				}
			}
			s.Verified++
			s.tokens[*st.Token] = true
			if s.FinishedAt == nil || at.After(*s.FinishedAt) {
				s.FinishedAt = &at
			}
		}
	}
	for i := range tl.Steps {
		tl.Steps[i].Attempts = max(len(tl.Steps[i].tokens), tl.Steps[i].Started)
	}
	return tl, nil
}

// printTimeline prints the step rows as a table, then the run's events, in local time (with
// the date when the timeline spans more than one day).
func printTimeline(tl timeline) {
	layout := "15:04:05.000"
	var first, last time.Time
	for _, e := range tl.Events {
		if first.IsZero() || e.At.Before(first) {
			first = e.At
		}
		if e.At.After(last) {
			last = e.At
		}
	}
	for _, s := range tl.Steps {
		for _, t := range []*time.Time{s.StartedAt, s.FinishedAt} {
			if t != nil && (first.IsZero() || t.Before(first)) {
				first = *t
			}
			if t != nil && t.After(last) {
				last = *t
			}
		}
	}
	if !first.IsZero() && first.Local().Format(time.DateOnly) != last.Local().Format(time.DateOnly) {
		layout = "2006-01-02 " + layout
	}
	when := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.Local().Format(layout)
	}
	fmt.Printf("run %s: %d audit events", tl.RunID, tl.Count)
	if !first.IsZero() {
		fmt.Printf(", %s to %s (%s)", first.Local().Format("2006-01-02 15:04:05.000"), when(&last), last.Sub(first).Round(time.Millisecond))
	}
	fmt.Println()
	fmt.Println()
	graph := slices.ContainsFunc(tl.Steps, func(s stepTimeline) bool { return s.After != nil })
	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprint(tw, "STEP\t")
	if graph {
		fmt.Fprint(tw, "AFTER\t")
	}
	fmt.Fprintln(tw, "STARTED\tFINISHED\tTOOK\tATTEMPTS\tRESTARTS\tFAILED\tFENCED\tHANDOVERS\tREASSIGNED\tITEMS")
	for _, s := range tl.Steps {
		fmt.Fprintf(tw, "%s\t", s.Step)
		if graph {
			fmt.Fprintf(tw, "%s\t", cmp.Or(strings.Join(s.After, ","), "-"))
		}
		took := "-"
		if s.StartedAt != nil && s.FinishedAt != nil {
			took = s.FinishedAt.Sub(*s.StartedAt).Round(time.Millisecond).String()
		}
		var items []string
		for _, k := range slices.Sorted(maps.Keys(s.Items)) {
			items = append(items, fmt.Sprintf("%d %s", s.Items[k], k))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", when(s.StartedAt), when(s.FinishedAt), took,
			s.Attempts, s.Restarts, s.Failed, s.Fenced, s.Handovers, s.Reassigned, strings.Join(items, ", "))
	}
	_ = tw.Flush()
	fmt.Println()
	fmt.Println("events:")
	tw = tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	for _, e := range tl.Events {
		detail := e.Detail
		if e.Owner != "" && !strings.Contains(detail, e.Owner) {
			detail = strings.TrimSpace("owner " + e.Owner + " " + detail)
		}
		for _, k := range slices.Sorted(maps.Keys(e.Attrs)) {
			detail = strings.TrimSpace(detail + " " + k + "=" + e.Attrs[k])
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", e.At.Local().Format(layout), e.Event, cmp.Or(e.Step, "-"), cutRunes(detail, 100))
	}
	_ = tw.Flush()
}
