package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/cairnhq/cairn/internal/night"
	"github.com/cairnhq/cairn/internal/service"
	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/faultmap"
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
	other := fs.String("pipeline", "", "the map of another pipeline than the night, as its Init (pkg/app) registered it on CAIRN_NATS_URL (connects to NATS)")
	approval := fs.String("approval-steps", "", "comma-separated steps that wait for a person, in place of CAIRN_APPROVAL_STEPS: shows what that setting would change")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	if *other != "" && *other != night.Pipeline.Name {
		return registeredFaultmap(ctx, w, *other, *raw)
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
		if _, ok := impls[name].(runner.ProgressCounter); ok {
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
func registeredFaultmap(ctx context.Context, w io.Writer, name string, raw bool) error {
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
	if raw {
		return writeMapJSON(w, m)
	}
	if err := m.WriteText(w); err != nil {
		return fmt.Errorf("writing the fault map: %w", err)
	}
	return m.Err()
}
