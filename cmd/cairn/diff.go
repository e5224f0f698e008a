package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"

	"github.com/cairnhq/cairn/internal/books"
	"github.com/cairnhq/cairn/internal/rundiff"
	"github.com/cairnhq/cairn/pkg/artifacts"
	"github.com/cairnhq/cairn/pkg/assets"
)

// cmdDiff compares two runs step by step, outputs and effects (a shadow run with a real one).
func cmdDiff(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("diff", flag.ContinueOnError)
	raw := fs.Bool("json", false, "print the comparison as JSON")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return fmt.Errorf("%w: diff RUN_A RUN_B [--json]", errUsage)
	}
	c, nc, js, err := connect("cli")
	if err != nil {
		return err
	}
	defer nc.Close()
	store, err := openRuns(ctx, js)
	if err != nil {
		return err
	}
	arts, err := artifacts.Open(ctx, js, assets.ObjectArtifacts)
	if err != nil {
		return err
	}
	ledger, err := books.Open(ctx, string(c.LedgerDSN))
	if err != nil {
		return fmt.Errorf("CAIRN_LEDGER_DSN: %w", err)
	}
	defer ledger.Close()
	erp, err := books.Open(ctx, string(c.ERPDSN))
	if err != nil {
		return fmt.Errorf("CAIRN_ERP_DSN: %w", err)
	}
	defer erp.Close()
	parts, err := rundiff.Compare(ctx, rundiff.Sources{JS: js, Store: store, Artifacts: arts, Ledger: ledger, ERP: erp}, pos[0], pos[1])
	if err != nil {
		return err
	}
	if *raw {
		b, err := json.Marshal(struct {
			A     string         `json:"a"`
			B     string         `json:"b"`
			Same  bool           `json:"same"`
			Parts []rundiff.Part `json:"parts"`
		}{pos[0], pos[1], rundiff.Same(parts), parts})
		if err != nil {
			return err
		}
		fmt.Println(string(b))
	} else {
		fmt.Printf("%s against %s (run ids replaced by %s; times, tokens and generations left out)\n", pos[0], pos[1], rundiff.Placeholder)
		for _, p := range parts {
			if len(p.Differences) == 0 {
				fmt.Printf("  %-24s same\n", p.Name)
				continue
			}
			fmt.Printf("  %-24s %d differences\n", p.Name, len(p.Differences))
			for _, d := range p.Differences {
				fmt.Printf("      %s\n", d)
			}
		}
	}
	if !rundiff.Same(parts) {
		return exitCode{code: 1, err: errors.New("the runs differ")}
	}
	return nil
}
