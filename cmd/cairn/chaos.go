package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cairnhq/cairn/internal/chaos"
	"github.com/cairnhq/cairn/internal/night"
)

// cmdChaos runs the reference night once uninterrupted, then once per crash point, and
// compares each with the reference. It exits 1 on any difference or a fault that never fired.
func cmdChaos(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	dir := fs.String("dir", filepath.Join(".cairn", "chaos"), "working folder (one subfolder per night, emptied first)")
	points := fs.String("points", "", "comma-separated CAIRN_FAULTS rules to crash at (default: every step boundary and sampled writes)")
	limit := fs.Duration("limit", 5*time.Minute, "how long one night may take")
	asJSON := fs.Bool("json", false, "print the results as JSON")
	if err := fs.Parse(args); err != nil {
		return err
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
