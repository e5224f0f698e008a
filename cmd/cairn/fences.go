package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/cairnhq/cairn/internal/books"
	"github.com/cairnhq/cairn/pkg/fence"
)

// cmdFences: `cairn fences adopt RUN` moves a run's fences in the ledger and the stock store
// to the epoch of the current NATS storage (DESIGN.md, "Epoch"). A run whose fences hold
// another epoch (NATS storage lost or replaced while the databases stayed) is handed over
// as "foreign epoch"; a person checks it, adopts, then resumes it.
func cmdFences(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "adopt" {
		return fmt.Errorf("%w: fences adopt RUN", errUsage)
	}
	fs := flag.NewFlagSet("fences adopt", flag.ContinueOnError)
	pos, err := parseArgs(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: fences adopt RUN", errUsage)
	}
	run := pos[0]
	c, nc, js, err := connect("cli")
	if err != nil {
		return err
	}
	defer nc.Close()
	store, err := openRuns(ctx, js)
	if err != nil {
		return err
	}
	rec, rev, err := store.Load(ctx, run)
	if err != nil {
		return fmt.Errorf("run %s: %w", run, err)
	}
	if rec.Lease != nil {
		return fmt.Errorf("run %s: %s holds its lease; adopt the fences of a stopped run only", run, rec.Lease.Owner)
	}
	// The record's revision: every later lease of the run is taken on a higher one.
	t := fence.Token{RunID: run, Epoch: store.Epoch(), Value: rev}
	for _, db := range []struct{ name, dsn string }{{"ledger", string(c.LedgerDSN)}, {"stock store", string(c.ERPDSN)}} {
		d, err := books.Open(ctx, db.dsn)
		if err != nil {
			return fmt.Errorf("%s: %w", db.name, err)
		}
		if db.name == "ledger" {
			err = d.Ledger(rec.Params.Shadow).AdoptFence(ctx, t)
		} else {
			err = d.Stock(rec.Params.Shadow).AdoptFence(ctx, t)
		}
		d.Close()
		if err != nil {
			return err
		}
		fmt.Printf("%s: the fence of %s now holds epoch %s, token %d\n", db.name, run, t.Epoch, t.Value)
	}
	fmt.Printf("next: cairn resume %s\n", run)
	return nil
}
