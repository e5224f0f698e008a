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
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cairnhq/cairn/internal/chaos"
	"github.com/cairnhq/cairn/internal/night"
	pchaos "github.com/cairnhq/cairn/pkg/chaos"
)

// cmdChaos runs the reference night once uninterrupted, then once per crash point, and
// compares each with the reference. It exits 1 on any difference or a fault that never fired.
func cmdChaos(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	dir := fs.String("dir", filepath.Join(".cairn", "chaos"), "working folder (one subfolder per night, emptied first)")
	points := fs.String("points", "", "comma-separated CAIRN_FAULTS rules to crash at (default: every step boundary and sampled writes)")
	limit := fs.Duration("limit", 5*time.Minute, "how long one night may take")
	asJSON := fs.Bool("json", false, "print the results as JSON")
	other := fs.String("pipeline", "", "crash another pipeline than the night: one hosted on pkg/app, through its binary (--bin) and its chaos-sandbox command (pkg/chaos)")
	bin := fs.String("bin", "", "with --pipeline: the pipeline's binary (default: bin/<pipeline>, else <pipeline> on PATH)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	if *other != "" && *other != night.Pipeline.Name {
		c := pchaos.Config{Pipeline: *other, Bin: *bin, Limit: *limit}
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "dir" {
				c.Dir = *dir
			}
		})
		if *points != "" {
			c.Points = strings.Split(*points, ",")
		}
		return pipelineChaos(ctx, os.Stdout, c, *asJSON)
	}
	if *bin != "" {
		return fmt.Errorf("%w: --bin is the binary of a pipeline given with --pipeline", errUsage)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	ref, err := chaos.Prepare(ctx, self, filepath.Join(*dir, "reference"))
	if err != nil {
		return err
	}
	if !*asJSON {
		fmt.Println("the reference night, uninterrupted …")
	}
	want, _, err := ref.Run(ctx, "", *limit)
	if err != nil {
		return fmt.Errorf("the reference night: %w", err)
	}
	list := chaos.Points(ref.Truth, night.Pipeline.Names())
	if *points != "" {
		list = strings.Split(*points, ",")
	}
	// The compensator's points crash an undo of the whole night: their reference is the
	// night undone, uninterrupted.
	var wantUndone chaos.Outcome
	if slices.ContainsFunc(list, chaos.UndoPoint) {
		u, err := chaos.Prepare(ctx, self, filepath.Join(*dir, "reference-undo"))
		if err != nil {
			return err
		}
		u.Undo = true
		if !*asJSON {
			fmt.Println("the reference night, undone …")
		}
		if wantUndone, _, err = u.Run(ctx, "", *limit); err != nil {
			return fmt.Errorf("the reference night, undone: %w", err)
		}
	}
	var results []chaos.Result
	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	if !*asJSON {
		fmt.Fprintln(tw, "CRASH POINT\tFIRED\tRESUMED\tDUPLICATES\tDIFFERENCES\tEXTRA CALLS\tTIME")
	}
	bad := 0
	for i, fault := range list {
		n, err := chaos.Prepare(ctx, self, filepath.Join(*dir, fmt.Sprintf("night-%02d", i+1)))
		if err != nil {
			return err
		}
		n.Undo = chaos.UndoPoint(fault)
		got, res, err := n.Run(ctx, fault, *limit)
		if err != nil {
			res.Differences = append(res.Differences, err.Error())
		} else {
			ref := want
			if n.Undo {
				ref = wantUndone
			}
			exp := chaos.Expected(ref, fault)
			res.Differences, res.Duplicates = chaos.Compare(got, exp)
			res.ExtraCalls = got.ExtractorCalls - exp.ExtractorCalls
		}
		if len(res.Differences) > 0 || !res.Fired {
			bad++
		}
		results = append(results, res)
		if !*asJSON {
			fmt.Fprintf(tw, "%s\t%t\t%s\t%d\t%d\t%d\t%s\n", fault, res.Fired, strings.Join(res.Resumed, ","), res.Duplicates, len(res.Differences), res.ExtraCalls, res.Took.Round(10*time.Millisecond))
			fmt.Fprintf(os.Stderr, "\r%d of %d crash points", i+1, len(list))
		}
	}
	if *asJSON {
		b, err := json.Marshal(results)
		if err != nil {
			return err
		}
		fmt.Println(string(b))
	} else {
		fmt.Fprintln(os.Stderr)
		_ = tw.Flush()
		for _, r := range results {
			for _, d := range r.Differences {
				fmt.Printf("%s: %s\n", r.Fault, d)
			}
		}
		fmt.Printf("%d crash points, %d with differences or not fired\n", len(results), bad)
	}
	if bad > 0 {
		return exitCode{code: 1, err: errors.New("differences found")}
	}
	return nil
}

// pipelineChaos runs pkg/chaos for a hosted pipeline and prints a line per crash point; the
// report goes to the chaos folder (default .cairn/chaos/<pipeline>), where cairn faultmap
// --pipeline reads it. It exits 1 on any difference or a point that never fired.
func pipelineChaos(ctx context.Context, w io.Writer, c pchaos.Config, asJSON bool) error {
	if c.Dir == "" {
		c.Dir = filepath.Join(".cairn", "chaos", c.Pipeline)
	}
	if c.Bin == "" {
		local := filepath.Join("bin", c.Pipeline)
		if _, err := os.Stat(local); err == nil {
			c.Bin = local
		} else if p, err := exec.LookPath(c.Pipeline); err == nil {
			c.Bin = p
		} else {
			return fmt.Errorf("%w: --pipeline %s needs its binary: give --bin (none at %s, nor %s on PATH)", errUsage, c.Pipeline, local, c.Pipeline)
		}
	}
	if abs, err := filepath.Abs(c.Bin); err == nil {
		c.Bin = abs
	}
	if !asJSON {
		c.Progress = func(done, of int, r pchaos.Result) {
			if r.Point == "" {
				fmt.Fprintf(w, "the reference run, uninterrupted: %s in %s; %d crash points\n", r.Status, time.Duration(r.TookMS)*time.Millisecond, of)
				return
			}
			fmt.Fprintf(os.Stderr, "\r%d of %d crash points", done, of)
		}
	}
	rep, err := pchaos.Run(ctx, c)
	if err != nil {
		return err
	}
	if asJSON {
		b, err := json.Marshal(rep)
		if err != nil {
			return err
		}
		fmt.Fprintln(w, string(b))
	} else {
		fmt.Fprintln(os.Stderr)
		writeChaosReport(w, rep)
		fmt.Fprintf(w, "the report: %s (cairn faultmap --pipeline %s shows it)\n", filepath.Join(c.Dir, pchaos.ReportFile), c.Pipeline)
	}
	if rep.Bad() > 0 {
		return exitCode{code: 1, err: errors.New("differences found")}
	}
	return nil
}

// writeChaosReport prints a report: a line per crash point, then each difference.
func writeChaosReport(w io.Writer, rep pchaos.Report) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CRASH POINT\tFIRED\tENDED\tRESUMED\tDUPLICATES\tDIFFERENCES\tEXTRA CALLS\tTIME")
	for _, r := range rep.Results {
		fmt.Fprintf(tw, "%s\t%t\t%s\t%s\t%d\t%d\t%s\t%s\n", r.Point, r.Fired, orDash(string(r.Status)), orDash(strings.Join(r.Resumed, ",")),
			r.Duplicates, len(r.Differences), calls(r.ExtraCalls), (time.Duration(r.TookMS) * time.Millisecond).Round(10*time.Millisecond))
	}
	_ = tw.Flush()
	for _, r := range rep.Results {
		for _, d := range r.Differences {
			fmt.Fprintf(w, "%s: %s\n", r.Point, d)
		}
		if !r.Fired && len(r.Differences) == 0 {
			fmt.Fprintf(w, "%s: never fired: the run ended without reaching it\n", r.Point)
		}
	}
	fmt.Fprintf(w, "%d crash points, %d with differences or not fired\n", len(rep.Results), rep.Bad())
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// calls shows extra calls by system, "0" when none.
func calls(m map[string]int) string {
	if len(m) == 0 {
		return "0"
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("%s %+d", k, m[k]))
	}
	return strings.Join(out, ", ")
}
