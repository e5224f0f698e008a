// Command cairn is the operator's tool: it creates the NATS assets, runs everything in one
// process for development, generates the reference night, starts runs and shows them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/cairnhq/cairn/internal/service"
)

const usage = `usage: cairn <command> [flags]

commands:
  init      create the NATS assets, or check the existing ones (every registered pipeline's too)
  dev       run an embedded nats-server, init, and every service in one process
  gen       generate one night's data (invoices, ERP tables, ground truth)
  start     start a run of the night (--warehouse, --date) or of a registered pipeline (--pipeline NAME --input KEY=VALUE or --json '{...}'); --wait to follow it; a refused start exits 1
  runs      list every pipeline's runs: status, current step, age, restarts (--status S[,S], --step STEP, --pipeline NAME, --json)
  permissions  permissions --pipeline NAME [--service SERVICE] [--json]: the NATS user a registered pipeline's services connect as (--service: that one service's own user)
  timeline  a run's timeline from the audit: each step's times, attempts and restarts, then the run's events (--json)
  status    print a run's checkpoint and its handover note (--json for the raw record)
  handovers list the runs handed to a person, with what stopped them
  rejected  list the refused input of the night (or --pipeline NAME): time, run, subject, reason (--run RUN, --last N, --json)
  resume    resume a handed-over or cancelled run (--after-fix once the cause is fixed)
  cancel    stop a run at the next step boundary (it can be resumed)
  rerun     run a run again from a step (--from STEP), keeping the earlier steps' outputs
  approve   let a run that waits on a plan (CAIRN_APPROVAL_STEPS) go on (--by NAME --seed FILE: signed; --pipeline NAME: a registered pipeline's run)
  approver  approver add NAME PUBKEY (or --new-seed FILE): register who may approve, by their key (--pipeline NAME: a registered pipeline's approver)
  seeds     seeds DIR: make each service's signing seed (DIR/<service>.seed) offline, for a deployment's secrets
  reject    refuse a waiting plan: the run is undone (--pipeline NAME: a registered pipeline's run)
  undo      reverse a run's effects, newest first (--supplier ID or --step STEP for part of it)
            (resume, cancel, rerun and undo also act on every run matching --where 'status=…,step=…')
  fences    fences adopt RUN: move a run's fences to this NATS storage's epoch, after a person checked it
  diff      compare two runs step by step, outputs and effects (a shadow run with a real one)
  faultmap  print how each step survives faults, and the gaps (exit 1 when there are any); --pipeline NAME: a pipeline its Init registered on NATS
  chaos     crash the reference night (or --pipeline P, through its binary) at every step boundary and sampled writes, compare each with an uninterrupted one
  bench     measure: transitions (with the raw JetStream floor), night, resume, many; "all" runs them at WORKLOAD.md's sizes into bench/results/
  ready     ask a service's /readyz on CAIRN_METRICS_ADDR: exit 0 when ready (a container's health check)
  demo      run the reference night with a real crash at entry 24 of post-ledger, and resume it
  service   run one service, as its own binary under services/ does: cairn service NAME

Settings come from CAIRN_* environment variables (see docs/operator.md, "Settings").
Run 'cairn <command> -h' for a command's flags.`

// errUsage: the command line was wrong; exit 2, as for a wrong setting (service.ErrSetting).
var errUsage = errors.New("usage")

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmds := map[string]func(context.Context, []string) error{
		"init": cmdInit, "dev": cmdDev, "gen": cmdGen, "start": cmdStart, "status": cmdStatus, "demo": cmdDemo,
		"handovers": cmdHandovers, "resume": cmdResume, "cancel": cmdCancel, "rerun": cmdRerun, "undo": cmdUndo, "faultmap": cmdFaultmap,
		"runs": cmdRuns, "timeline": cmdTimeline, "approve": cmdApprove, "approver": cmdApprover, "reject": cmdReject, "diff": cmdDiff, "fences": cmdFences, "chaos": cmdChaos, "bench": cmdBench,
		"ready": cmdReady, "permissions": cmdPermissions, "seeds": cmdSeeds, "service": cmdService, "rejected": cmdRejected,
	}
	name := os.Args[1]
	if name == "-h" || name == "--help" || name == "help" {
		fmt.Println(usage)
		return
	}
	cmd, ok := cmds[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "cairn: unknown command %q\n\n%s\n", name, usage)
		os.Exit(2)
	}
	err := cmd(ctx, os.Args[2:])
	if code := exitOf(err); code != 0 {
		fmt.Fprintf(os.Stderr, "cairn %s: %v\n", name, err)
		os.Exit(code)
	}
}

// exitOf is the exit code of a command's error: 0 for none (or -h), 2 for a wrong command
// line or setting, the code an exitCode carries (a run handed over: 3), and 1 for any other,
// a refused start (*app.Refused) among them.
func exitOf(err error) int {
	var code exitCode
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage), errors.Is(err, service.ErrSetting):
		return 2
	case errors.As(err, &code):
		return code.code
	default:
		return 1
	}
}

// cmdService runs one service in this binary, as services/NAME's one-line main does: one
// build serves every service (the e2e tests link one race binary, not thirteen).
func cmdService(_ context.Context, args []string) error {
	names := append(service.Services(), "ledger-api")
	if len(args) != 1 || !slices.Contains(names, args[0]) {
		return fmt.Errorf("%w: cairn service NAME, NAME one of %s", errUsage, strings.Join(names, ", "))
	}
	if args[0] == "ledger-api" {
		service.LedgerAPIMain()
	} else {
		service.Main(args[0])
	}
	return nil
}

// exitCode carries a specific exit code (a run handed over: 3).
type exitCode struct {
	code int
	err  error
}

func (e exitCode) Error() string { return e.err.Error() }
