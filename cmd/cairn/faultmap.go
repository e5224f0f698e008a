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
	"github.com/cairnhq/cairn/pkg/faultmap"
	"github.com/cairnhq/cairn/pkg/ratelimit"
	"github.com/cairnhq/cairn/pkg/runner"
)

// cmdFaultmap prints how each step of the night survives faults, under the retry settings
// of the environment, then the gaps; it fails (exit 1) when there are gaps. It does not
// connect to NATS.
func cmdFaultmap(_ context.Context, args []string) error {
	return runFaultmap(os.Stdout, args)
}

func runFaultmap(w io.Writer, args []string) error {
	fs := flag.NewFlagSet("faultmap", flag.ContinueOnError)
	raw := fs.Bool("json", false, "print one JSON object: {pipeline, settings, steps, gaps}")
	approval := fs.String("approval-steps", "", "comma-separated steps that wait for a person, in place of CAIRN_APPROVAL_STEPS: shows what that setting would change")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
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
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(m); err != nil {
			return fmt.Errorf("writing the fault map: %w", err)
		}
		return m.Err()
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
