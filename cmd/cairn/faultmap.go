package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/night"
	"github.com/cairnhq/cairn/internal/service"
	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/assets"
	pchaos "github.com/cairnhq/cairn/pkg/chaos"
	"github.com/cairnhq/cairn/pkg/faultmap"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/ratelimit"
	"github.com/cairnhq/cairn/pkg/runner"
)

// cmdFaultmap prints how each step of the night survives faults, under the retry settings
// of the environment, then the gaps; it fails (exit 1) when there are gaps. It does not
// connect to NATS, but for --pipeline: the map of another pipeline, as its Init registered
// it on CAIRN_NATS_URL (pkg/app), under the settings registered with it.
func cmdFaultmap(ctx context.Context, args []string) error {
	return runFaultmapCtx(ctx, os.Stdout, args)
}

func runFaultmap(w io.Writer, args []string) error {
	return runFaultmapCtx(context.Background(), w, args)
}

func runFaultmapCtx(ctx context.Context, w io.Writer, args []string) error {
	fs := flag.NewFlagSet("faultmap", flag.ContinueOnError)
	raw := fs.Bool("json", false, "print one JSON object: {pipeline, settings, steps, gaps}")
	other := fs.String("pipeline", "", "the map of another pipeline than the night, as its Init (pkg/app) registered it on CAIRN_NATS_URL (connects to NATS), with what its recent runs show")
	recent := fs.Int("runs", 50, "with --pipeline: how many of the latest runs' records to time each step by (0: none)")
	chaosDir := fs.String("chaos", "", "with --pipeline: the folder of the last cairn chaos --pipeline run, whose report each step shows (default .cairn/chaos/<pipeline>; none there: not shown)")
	approval := fs.String("approval-steps", "", "comma-separated steps that wait for a person, in place of CAIRN_APPROVAL_STEPS: shows what that setting would change")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	if *other != "" && *other != night.Pipeline.Name {
		if *recent < 0 {
			return fmt.Errorf("%w: --runs %d: give 0 or more", errUsage, *recent)
		}
		dir, given := *chaosDir, *chaosDir != ""
		if !given {
			dir = filepath.Join(".cairn", "chaos", *other)
		}
		rep, err := pchaos.ReadReport(dir)
		switch {
		case err == nil && rep.Pipeline != *other:
			return fmt.Errorf("%w: --chaos %s holds a chaos run of %s, not %s", errUsage, dir, rep.Pipeline, *other)
		case err != nil && (given || !errors.Is(err, iofs.ErrNotExist)):
			return fmt.Errorf("the last chaos run: %w", err)
		case err != nil:
			rep = pchaos.Report{}
		}
		return registeredFaultmap(ctx, w, *other, *raw, *recent, rep)
	}
	cfg, err := service.Load()
	if err != nil {
		return err
	}
	steps := cfg.ApprovalSteps
	override := false
	fs.Visit(func(f *flag.Flag) { override = override || f.Name == "approval-steps" })
	if override {
		steps = splitSteps(*approval)
	}
	m, err := faultmap.Analyze(night.Pipeline, faultmap.Settings{
		RetryAttempts: cfg.RetryAttempts, LoopGuard: cfg.LoopGuard, MaxDeliver: cfg.MaxDeliver,
		ReassignLimit: cfg.ReassignLimit, ProgressSteps: progressSteps(),
		ApprovalSteps: steps, RateLimits: map[string]float64{"CAIRN_MODEL_RPS": cfg.ModelRPS},
		SharedLimits:  map[string]ratelimit.Limit{"CAIRN_MODEL_RPS": cfg.ModelLimit()},
		OutboxBackoff: cfg.OutboxBackoff,
	})
	if err != nil {
		return err
	}
	if *raw {
		return writeMapJSON(w, m)
	}
	if override {
		fmt.Fprintln(w, approvalChange(cfg.ApprovalSteps, steps))
	}
	if err := m.WriteText(w); err != nil {
		return fmt.Errorf("writing the fault map: %w", err)
	}
	return m.Err()
}

// approvalChange says what --approval-steps changes against CAIRN_APPROVAL_STEPS.
func approvalChange(env, given []string) string {
	var wait, stop []string
	for _, s := range given {
		if !slices.Contains(env, s) {
			wait = append(wait, s)
		}
	}
	for _, s := range env {
		if !slices.Contains(given, s) {
			stop = append(stop, s)
		}
	}
	out := fmt.Sprintf("--approval-steps=%s in place of CAIRN_APPROVAL_STEPS=%s: ", approvalList(given), approvalList(env))
	switch {
	case len(wait) == 0 && len(stop) == 0:
		return out + "no change"
	case len(stop) == 0:
		return out + "would also wait for a person: " + strings.Join(wait, ", ")
	case len(wait) == 0:
		return out + "would no longer wait: " + strings.Join(stop, ", ")
	default:
		return out + "would also wait for a person: " + strings.Join(wait, ", ") + "; would no longer wait: " + strings.Join(stop, ", ")
	}
}

// approvalList shows a list of steps, or "(empty)".
func approvalList(xs []string) string {
	if len(xs) == 0 {
		return "(empty)"
	}
	return strings.Join(xs, ",")
}

// splitSteps splits a comma-separated list, trimming items and dropping empty ones.
func splitSteps(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// progressSteps are the night's steps whose implementation counts its progress, as the
// runner finds them.
func progressSteps() []string {
	impls := (&night.Env{}).Steps()
	var out []string
	for _, name := range night.Pipeline.Names() {
		if runner.AbilitiesOf(impls[name]).CountsProgress {
			out = append(out, name)
		}
	}
	return out
}

func writeMapJSON(w io.Writer, m faultmap.Map) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(m); err != nil {
		return fmt.Errorf("writing the fault map: %w", err)
	}
	return m.Err()
}

// registeredFaultmap prints the map of pipeline name as registered on CAIRN_NATS_URL.
func registeredFaultmap(ctx context.Context, w io.Writer, name string, raw bool, recent int, chaosRun pchaos.Report) error {
	_, nc, js, err := connect("faultmap")
	if err != nil {
		return err
	}
	defer nc.Close()
	reg, err := app.Registered(ctx, js, name)
	if err != nil {
		return err
	}
	m, err := faultmap.Analyze(reg.Definition(), reg.Settings)
	if err != nil {
		return err
	}
	if recent > 0 {
		recs, err := latestRuns(ctx, js, reg, recent)
		if err != nil {
			return err
		}
		m.Observe(recs)
	}
	if chaosRun.Pipeline != "" {
		m.Chaos(chaosRun.At, chaosRun.Crashes())
	}
	if raw {
		return writeMapJSON(w, m)
	}
	if err := m.WriteText(w); err != nil {
		return fmt.Errorf("writing the fault map: %w", err)
	}
	return m.Err()
}

// latestRuns reads the records of pipeline reg's n latest runs (by created_at), skipping any
// it cannot trust.
func latestRuns(ctx context.Context, js jetstream.JetStream, reg app.Registration, n int) ([]*kc.Record, error) {
	sp, err := reg.Space()
	if err != nil {
		return nil, err
	}
	store, err := kc.Open(ctx, js, sp.Bucket(assets.BucketRuns))
	if err != nil {
		return nil, fmt.Errorf("the runs of %s: %w", reg.Name, err)
	}
	// One watch delivers every run's latest record, as cairn runs reads them (listRuns),
	// not a read a run.
	w, err := store.KV().WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("the runs of %s: %w", reg.Name, err)
	}
	defer func() { _ = w.Stop() }()
	var recs []*kc.Record
	for e := range w.Updates() {
		if e == nil {
			break // every key's latest value has been delivered
		}
		if rec, err := decodeEntry(ctx, store, e); err == nil {
			recs = append(recs, rec)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(recs, func(a, b *kc.Record) int { return strings.Compare(b.CreatedAt, a.CreatedAt) })
	return recs[:min(n, len(recs))], nil
}
