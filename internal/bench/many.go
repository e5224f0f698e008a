package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"
)

// ManyConfig says how many small nights Many runs at once.
type ManyConfig struct {
	Bin        string
	Runs       int // R warehouses, one night each, one date; default 1000
	Invoices   int // N invoices a night; default 30
	Mismatches int // a night; default 4
	Dir        string
	Timeout    time.Duration // for the nights; default 10m
}

// ManyResult is R nights started at once.
type ManyResult struct {
	Runs         int     `json:"runs"`
	Invoices     int     `json:"invoices"`
	GenSeconds   float64 `json:"gen_seconds"`
	WallSeconds  float64 `json:"wall_seconds"` // every start published to the last run done
	RunsPerSec   float64 `json:"runs_per_second"`
	P50Seconds   float64 `json:"p50_run_seconds"` // a run's start to its done
	P99Seconds   float64 `json:"p99_run_seconds"`
	PeakRSSBytes int64   `json:"peak_rss_bytes"` // cairn dev's
	LedgerRows   int     `json:"ledger_rows"`
}

// Many generates R small nights (warehouses w0001 … on one date), runs `cairn dev`, starts
// every run at once and follows them all to done.
func Many(ctx context.Context, c ManyConfig) (res ManyResult, err error) {
	c.Runs = cmp.Or(c.Runs, 1000)
	c.Invoices = cmp.Or(c.Invoices, 30)
	c.Mismatches = cmp.Or(c.Mismatches, 4)
	c.Timeout = cmp.Or(c.Timeout, 10*time.Minute)
	res = ManyResult{Runs: c.Runs, Invoices: c.Invoices}
	dir, keep, err := workDir(c.Dir, "cairn-bench-many-")
	if err != nil {
		return res, err
	}
	defer keep(&err)
	began := time.Now()
	adjustments := 0
	runs := make([]string, c.Runs)
	for i := range runs {
		wh := fmt.Sprintf("w%04d", i+1)
		truth, err := generate(ctx, dir, wh, c.Invoices, c.Mismatches)
		if err != nil {
			return res, err
		}
		adjustments += len(truth.Adjustments)
		runs[i] = "run-" + nightDate + "-" + wh
	}
	res.GenSeconds = time.Since(began).Seconds()
	d, w, err := startWatched(ctx, c.Bin, dir)
	if err != nil {
		return res, err
	}
	defer d.stop()
	defer w.stop()
	t0 := time.Now()
	started := make([]time.Time, len(runs))
	for i, run := range runs {
		started[i] = time.Now()
		if err := d.startRun(ctx, run, fmt.Sprintf("w%04d", i+1), nightDate); err != nil {
			return res, err
		}
	}
	if _, err := w.until(ctx, c.Timeout, runs...); err != nil {
		return res, err
	}
	took := make([]float64, 0, len(runs))
	var last time.Time
	for i, run := range runs {
		at := w.doneAt[run]
		took = append(took, at.Sub(started[i]).Seconds())
		if at.After(last) {
			last = at
		}
	}
	slices.Sort(took)
	res.WallSeconds = last.Sub(t0).Seconds()
	res.RunsPerSec = float64(len(runs)) / res.WallSeconds
	res.P50Seconds = quantile(took, 0.50)
	res.P99Seconds = quantile(took, 0.99)
	res.PeakRSSBytes = peakRSS(d.proc.Pid())
	if res.LedgerRows, err = ledgerRows(ctx, dir, adjustments); err != nil {
		return res, err
	}
	return res, nil
}

// quantile of sorted values, nearest rank.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
