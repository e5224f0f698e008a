package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"

	"github.com/cairnhq/cairn/internal/bench"
)

const benchUsage = `usage: cairn bench <what> [flags]

  transitions  K runs of an S-step pipeline of no-op steps through the step runner, C runs in
               flight, and the raw JetStream floor in the same invocation
               [--runs K] [--concurrency C] [--steps S] [--sync-always] [--cluster 3]
  night        the reference night end to end under cairn dev [--invoices N --mismatches M]
  resume       the night killed at entry 24 of post-ledger, and the restart's resume
  many         R small nights at once [--runs R --invoices N]
  all          every measurement at WORKLOAD.md's sizes, each in a process of its own
               (transitions, night and resume --repeat times, medians reported); writes the
               JSON and the README's table [--out FILE] [--markdown FILE] [--repeat N]
               [--many-runs R] [--many-invoices N] [--big=false]

Every measurement prints a table, or with --json one JSON object; --dir DIR keeps its data.`

func cmdBench(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, benchUsage)
		return errUsage
	}
	subs := map[string]func(context.Context, []string) error{
		"transitions": benchTransitions,
		"night":       benchNight,
		"resume":      benchResume,
		"many":        benchMany,
		"all":         benchAll,
	}
	sub, ok := subs[args[0]]
	if !ok {
		if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			fmt.Println(benchUsage)
			return nil
		}
		fmt.Fprintln(os.Stderr, benchUsage)
		return fmt.Errorf("%w: no measurement %q", errUsage, args[0])
	}
	return sub(ctx, args[1:])
}

// printed is a measurement's result: a table for people, or one JSON object.
type printed interface {
	Table(w io.Writer)
}

// emit prints a measurement's result, even a failed one's (what it measured so far): with
// asJSON one object, with an "error" member when it failed.
func emit(v printed, asJSON bool, failed error) error {
	if asJSON {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if failed != nil {
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				return err
			}
			m["error"] = failed.Error()
			if b, err = json.Marshal(m); err != nil {
				return err
			}
		}
		var out bytes.Buffer
		if err := json.Indent(&out, b, "", "  "); err != nil {
			return err
		}
		fmt.Println(out.String())
		return failed
	}
	v.Table(os.Stdout)
	return failed
}

func benchTransitions(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench transitions", flag.ContinueOnError)
	runs := fs.Int("runs", 1000, "K: runs")
	conc := fs.Int("concurrency", 16, "C: runs in flight (and messages each step runner handles at once)")
	steps := fs.Int("steps", 10, "S: no-op steps a run")
	syncAlways := fs.Bool("sync-always", false, "sync_interval: always (fsync every write before its ack)")
	cluster := fs.Int("cluster", 1, "servers: 1, or 3 clustered on loopback with every stream and bucket at replicas 3 (the floor's too)")
	separate := fs.Bool("separate", false, "a connection and a store per step runner, as one service per step: each step reads and checks the record its predecessor wrote")
	asJSON := fs.Bool("json", false, "print one JSON object")
	dir := fs.String("dir", "", "keep the servers' storage in this folder; default a temporary one")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the measured part (Cairn's, not the floor's) to this file")
	tracefile := fs.String("trace", "", "write an execution trace (runtime/trace) of the measured part (Cairn's, not the floor's) to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c := bench.TransitionsConfig{Runs: *runs, Concurrency: *conc, Steps: *steps, SyncAlways: *syncAlways, Cluster: *cluster, Separate: *separate, Dir: *dir}
	for _, p := range []struct {
		path, what string
		start      func(io.Writer) error
		stop       func()
	}{
		{*cpuprofile, "cpu profile", pprof.StartCPUProfile, pprof.StopCPUProfile},
		{*tracefile, "trace", trace.Start, trace.Stop},
	} {
		if p.path == "" {
			continue
		}
		f, err := os.Create(p.path)
		if err != nil {
			return err
		}
		defer f.Close()
		before := c.Profile // both flags: both run
		c.Profile = func() func() {
			stopBefore := func() {}
			if before != nil {
				stopBefore = before()
			}
			if err := p.start(f); err != nil {
				fmt.Fprintf(os.Stderr, "cairn bench: %s: %v\n", p.what, err)
				return stopBefore
			}
			return func() { p.stop(); stopBefore() }
		}
	}
	res, err := bench.Transitions(ctx, c)
	return emit(res, *asJSON, err)
}

// nightFlags are the flags of the measurements that run `cairn dev` (this binary): --dir and
// --json; parse parses args and finds this binary.
type nightFlags struct {
	fs     *flag.FlagSet
	dir    *string
	asJSON *bool
}

func newNightFlags(name string) nightFlags {
	fs := flag.NewFlagSet("bench "+name, flag.ContinueOnError)
	return nightFlags{fs: fs,
		dir:    fs.String("dir", "", "keep the data, storage and logs in this folder (emptied first); default a temporary one"),
		asJSON: fs.Bool("json", false, "print one JSON object")}
}

func (f nightFlags) parse(args []string) (self string, err error) {
	if err := f.fs.Parse(args); err != nil {
		return "", err
	}
	return os.Executable()
}

func benchNight(ctx context.Context, args []string) error {
	f := newNightFlags("night")
	invoices := f.fs.Int("invoices", 312, "invoices in the night")
	mismatches := f.fs.Int("mismatches", 40, "mismatching lines")
	self, err := f.parse(args)
	if err != nil {
		return err
	}
	res, err := bench.Night(ctx, bench.NightConfig{Bin: self, Invoices: *invoices, Mismatches: *mismatches, Dir: *f.dir})
	return emit(res, *f.asJSON, err)
}

func benchResume(ctx context.Context, args []string) error {
	f := newNightFlags("resume")
	self, err := f.parse(args)
	if err != nil {
		return err
	}
	res, err := bench.Resume(ctx, bench.ResumeConfig{Bin: self, Dir: *f.dir})
	return emit(res, *f.asJSON, err)
}

func benchMany(ctx context.Context, args []string) error {
	f := newNightFlags("many")
	runs := f.fs.Int("runs", 1000, "R: nights at once, one warehouse each")
	invoices := f.fs.Int("invoices", 30, "N: invoices a night")
	self, err := f.parse(args)
	if err != nil {
		return err
	}
	res, err := bench.Many(ctx, bench.ManyConfig{Bin: self, Runs: *runs, Invoices: *invoices, Dir: *f.dir})
	return emit(res, *f.asJSON, err)
}

func benchAll(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench all", flag.ContinueOnError)
	out := fs.String("out", filepath.Join("bench", "results", "latest.json"), "write the JSON here")
	md := fs.String("markdown", filepath.Join("bench", "results", "latest.md"), "write the README's table here")
	repeat := fs.Int("repeat", 3, "runs of transitions, night and resume; medians are reported")
	manyRuns := fs.Int("many-runs", 1000, "R of the many-nights measurement")
	manyInvoices := fs.Int("many-invoices", 30, "N of the many-nights measurement")
	big := fs.Bool("big", true, "also the big night (100,000 invoices) and its 10,000-invoice reference")
	asJSON := fs.Bool("json", false, "print the JSON instead of the table")
	if err := fs.Parse(args); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	s, err := bench.All(ctx, bench.SuiteConfig{Bin: self, Repeat: *repeat, ManyRuns: *manyRuns, ManyInvoices: *manyInvoices, Big: *big, Log: os.Stderr})
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	var table bytes.Buffer
	s.Markdown(&table)
	for path, data := range map[string][]byte{*out: append(b, '\n'), *md: table.Bytes()} {
		if path == "" {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return err
		}
	}
	if *asJSON {
		fmt.Println(string(b))
		return nil
	}
	fmt.Print(table.String())
	return nil
}
