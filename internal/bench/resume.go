package bench

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/cairnhq/cairn/pkg/faults"
)

// ResumeFault is the crash of WORKLOAD.md: the worker dies at entry 24 of post-ledger.
const ResumeFault = "post-ledger.before-write.24=exit@once"

// ResumeConfig says how Resume runs.
type ResumeConfig struct {
	Bin     string
	Dir     string        // default a temporary folder, removed afterwards
	Timeout time.Duration // for each phase; default 5m
}

// ResumeResult times the restart after the entry-24 crash.
type ResumeResult struct {
	// ReadySeconds is the new process's start to its "ready" (server, assets, services).
	ReadySeconds float64 `json:"ready_seconds"`
	// ContinueSeconds is the new process's start to post-ledger taken again (its lease,
	// as the record's started_at says).
	ContinueSeconds float64 `json:"continue_seconds"`
	// DoneSeconds is the new process's start to the run done.
	DoneSeconds  float64 `json:"done_seconds"`
	Restarts     int     `json:"restarts"`
	LedgerRows   int     `json:"ledger_rows"`
	PeakRSSBytes int64   `json:"peak_rss_bytes"` // the second process's
}

// Resume runs the reference night with the crash at entry 24 of post-ledger, then starts
// `cairn dev` again on the same data and times how soon post-ledger goes on, and the run
// is done.
func Resume(ctx context.Context, c ResumeConfig) (res ResumeResult, err error) {
	c.Timeout = cmp.Or(c.Timeout, 5*time.Minute)
	dir, keep, err := workDir(c.Dir, "cairn-bench-resume-")
	if err != nil {
		return res, err
	}
	defer keep(&err)
	truth, err := generate(ctx, dir, nightWarehouse, 312, 40)
	if err != nil {
		return res, err
	}
	url, err := freeURL()
	if err != nil {
		return res, err
	}
	first, err := startDev(c.Bin, dir, url, 1, ResumeFault)
	if err != nil {
		return res, err
	}
	if err := first.startRun(ctx, nightRun, nightWarehouse, nightDate); err != nil {
		first.stop()
		return res, err
	}
	code, err := first.proc.Wait(c.Timeout)
	first.stop()
	if err != nil || code != faults.ExitCode {
		return res, fmt.Errorf("the first cairn dev should have died at entry 24 of post-ledger (exit %d), ended with %d (%v); log %s", faults.ExitCode, code, err, first.proc.Log)
	}
	second, err := startDev(c.Bin, dir, url, 2, ResumeFault)
	if err != nil {
		return res, err
	}
	defer second.stop()
	res.ReadySeconds = second.ready.Sub(second.started).Seconds()
	w, err := second.watch(ctx)
	if err != nil {
		return res, err
	}
	defer w.stop()
	rec, err := w.until(ctx, c.Timeout, nightRun)
	if err != nil {
		return res, err
	}
	res.DoneSeconds = w.doneAt[nightRun].Sub(second.started).Seconds()
	res.Restarts = rec.Restarts
	res.PeakRSSBytes = peakRSS(second.proc.Pid())
	// post-ledger's started_at is the take of its last attempt: the restart's.
	if s := rec.Step("post-ledger"); s.StartedAt != nil {
		at, err := time.Parse(time.RFC3339Nano, *s.StartedAt)
		if err != nil {
			return res, fmt.Errorf("post-ledger's started_at %q: %w", *s.StartedAt, err)
		}
		res.ContinueSeconds = at.Sub(second.started).Seconds()
	}
	if rec.Restarts < 1 || res.ContinueSeconds <= 0 {
		return res, fmt.Errorf("the run finished with %d restarts and post-ledger taken %.3fs after the restart: it did not resume post-ledger", rec.Restarts, res.ContinueSeconds)
	}
	if res.LedgerRows, err = ledgerRows(ctx, dir, len(truth.Adjustments)); err != nil {
		return res, err
	}
	return res, nil
}
