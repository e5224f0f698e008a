package bench

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/devproc"
	"github.com/cairnhq/cairn/internal/night"
	"github.com/cairnhq/cairn/internal/recon"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"

	"github.com/cairnhq/cairn/internal/sqlitefile"
	_ "modernc.org/sqlite"
)

// The reference night (WORKLOAD.md).
const (
	nightWarehouse = "ldh"
	nightDate      = "2026-10-13"
	nightRun       = "run-2026-10-13-ldh"
)

// NightConfig says which night Night runs.
type NightConfig struct {
	Bin        string // the cairn binary; `cairn dev` runs the night
	Invoices   int    // default 312
	Mismatches int    // default 40
	// Dir holds the night's data and storage; default a temporary folder, removed afterwards.
	Dir     string
	Timeout time.Duration // for the night itself; default 10m
}

func (c NightConfig) withDefaults() NightConfig {
	c.Invoices = cmp.Or(c.Invoices, 312)
	c.Mismatches = cmp.Or(c.Mismatches, 40)
	c.Timeout = cmp.Or(c.Timeout, 10*time.Minute)
	return c
}

// StepTime is how long one step of a night took: from the previous step's commit (the
// start, for the first) to its own.
type StepTime struct {
	Step    string  `json:"step"`
	Seconds float64 `json:"seconds"`
}

// NightResult is one night, end to end.
type NightResult struct {
	Invoices   int     `json:"invoices"`
	Mismatches int     `json:"mismatches"`
	GenSeconds float64 `json:"gen_seconds"` // generating the data, not part of the night
	// Steps are the steps' times; "mail" is the last step's commit to done (the outbox
	// sender delivering the run's messages).
	Steps []StepTime `json:"steps"`
	// TotalSeconds is services up (cairn dev ready) and the start published, to done.
	TotalSeconds float64 `json:"total_seconds"`
	PeakRSSBytes int64   `json:"peak_rss_bytes"` // cairn dev's
	// CheckpointBytes is the largest revision of the run's record, FinalCheckpointBytes
	// the last.
	CheckpointBytes      int   `json:"checkpoint_bytes"`
	FinalCheckpointBytes int   `json:"final_checkpoint_bytes"`
	ArtifactBytes        int64 `json:"artifact_bytes"` // the object store, all told
	LedgerRows           int   `json:"ledger_rows"`    // checked against the ground truth
}

// Night generates a night's data, runs `cairn dev` on it, starts the run and follows it to
// done, then checks the ledger against the ground truth.
func Night(ctx context.Context, c NightConfig) (res NightResult, err error) {
	c = c.withDefaults()
	res = NightResult{Invoices: c.Invoices, Mismatches: c.Mismatches}
	dir, keep, err := workDir(c.Dir, "cairn-bench-night-")
	if err != nil {
		return res, err
	}
	defer keep(&err)
	began := time.Now()
	truth, err := generate(ctx, dir, nightWarehouse, c.Invoices, c.Mismatches)
	if err != nil {
		return res, err
	}
	res.GenSeconds = time.Since(began).Seconds()
	d, w, err := startWatched(ctx, c.Bin, dir)
	if err != nil {
		return res, err
	}
	defer d.stop()
	defer w.stop()
	t0 := time.Now()
	if err := d.startRun(ctx, nightRun, nightWarehouse, nightDate); err != nil {
		return res, err
	}
	rec, err := w.until(ctx, c.Timeout, nightRun)
	// What the night did so far counts even when it did not finish.
	res.PeakRSSBytes = peakRSS(d.proc.Pid())
	res.CheckpointBytes, res.FinalCheckpointBytes = w.maxSize[nightRun], w.lastSize[nightRun]
	if rec = cmp.Or(rec, w.last[nightRun]); rec != nil {
		res.Steps = stepTimes(rec, t0, w.doneAt[nightRun])
	}
	if err != nil {
		return res, err
	}
	res.TotalSeconds = w.doneAt[nightRun].Sub(t0).Seconds()
	if res.ArtifactBytes, err = d.artifactBytes(ctx); err != nil {
		return res, err
	}
	if res.LedgerRows, err = ledgerRows(ctx, dir, len(truth.Adjustments)); err != nil {
		return res, err
	}
	return res, nil
}

// workDir is dir (emptied first), or a fresh temporary folder. keep, called with the
// measurement's error, removes the temporary folder unless the measurement failed: then
// it names the folder, with the logs, in the error.
func workDir(dir, pattern string) (string, func(*error), error) {
	if dir != "" {
		if err := os.RemoveAll(dir); err != nil {
			return "", nil, err
		}
		return dir, func(*error) {}, os.MkdirAll(dir, 0o755)
	}
	tmp, err := os.MkdirTemp("", pattern)
	if err != nil {
		return "", nil, err
	}
	return tmp, func(err *error) {
		if *err != nil {
			*err = fmt.Errorf("%w (data and logs kept in %s)", *err, tmp)
			return
		}
		_ = os.RemoveAll(tmp)
	}, nil
}

func generate(ctx context.Context, dir, warehouse string, invoices, mismatches int) (recon.Truth, error) {
	return recon.Generate(ctx, recon.GenConfig{Warehouse: warehouse, Date: nightDate, Invoices: invoices, Mismatches: mismatches, Seed: 1,
		InboxDir: filepath.Join(dir, "inbox"), ERPPath: filepath.Join(dir, "erp.db"), TruthDir: filepath.Join(dir, "truth")})
}

// stepTimes: each step from the previous one's commit, then the mail to done.
func stepTimes(rec *kc.Record, t0, done time.Time) []StepTime {
	var out []StepTime
	prev := t0
	for _, name := range rec.Pipeline {
		s := rec.Step(name)
		if s.FinishedAt == nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, *s.FinishedAt)
		if err != nil {
			continue
		}
		out = append(out, StepTime{Step: name, Seconds: at.Sub(prev).Seconds()})
		prev = at
	}
	if done.IsZero() {
		return out
	}
	return append(out, StepTime{Step: "mail", Seconds: done.Sub(prev).Seconds()})
}

func ledgerRows(ctx context.Context, dir string, want int) (int, error) {
	if err := sqlitefile.Private(filepath.Join(dir, "ledger.db")); err != nil {
		return 0, err
	}
	db, err := sql.Open("sqlite", filepath.Join(dir, "ledger.db"))
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(DISTINCT key) FROM ledger_entries`).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting ledger rows: %w", err)
	}
	if n != want {
		return n, fmt.Errorf("the ledger holds %d rows, the ground truth %d", n, want)
	}
	return n, nil
}

// dev is a `cairn dev` child process and a connection to its server.
type dev struct {
	proc    *devproc.Proc
	nc      *nats.Conn
	js      jetstream.JetStream
	started time.Time // just before the process was started
	ready   time.Time // when it printed ready
}

// freeURL is a NATS address on a free loopback port.
func freeURL() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return fmt.Sprintf("nats://127.0.0.1:%d", l.Addr().(*net.TCPAddr).Port), nil
}

// DevMemLimitEnv names the variable whose value, when set, is the GOMEMLIMIT of the `cairn
// dev` processes the measurements start (not of the measuring process): how they run in a
// container with a memory limit.
const DevMemLimitEnv = "CAIRN_BENCH_DEV_GOMEMLIMIT"

// startDev runs `cairn dev` (the n-th in dir, for its log's name) serving NATS on url, with
// fault set in CAIRN_FAULTS, and connects to it.
func startDev(bin, dir, url string, n int, fault string) (*dev, error) {
	if bin == "" {
		return nil, errors.New("no cairn binary to run cairn dev with")
	}
	env := append(os.Environ(), "CAIRN_DATA_DIR="+dir, "CAIRN_NATS_URL="+url, "CAIRN_FAULTS="+fault)
	if limit := os.Getenv(DevMemLimitEnv); limit != "" {
		env = append(env, "GOMEMLIMIT="+limit)
	}
	d := &dev{started: time.Now()}
	p, err := devproc.Start(bin, env, filepath.Join(dir, fmt.Sprintf("dev-%d.log", n)), time.Minute)
	if err != nil {
		return nil, err
	}
	d.proc, d.ready = p, time.Now()
	if d.nc, err = nats.Connect(url); err != nil {
		p.Stop(10 * time.Second)
		return nil, err
	}
	d.js, _ = jetstream.New(d.nc)
	return d, nil
}

// startWatched runs one `cairn dev` without faults on a free port and watches its runs'
// checkpoints.
func startWatched(ctx context.Context, bin, dir string) (*dev, *watcher, error) {
	url, err := freeURL()
	if err != nil {
		return nil, nil, err
	}
	d, err := startDev(bin, dir, url, 1, "")
	if err != nil {
		return nil, nil, err
	}
	w, err := d.watch(ctx)
	if err != nil {
		d.stop()
		return nil, nil, err
	}
	return d, w, nil
}

func (d *dev) stop() {
	if d.nc != nil {
		d.nc.Close()
	}
	d.proc.Stop(20 * time.Second)
}

func (d *dev) startRun(ctx context.Context, run, warehouse, date string) error {
	body := fmt.Sprintf(`{"run_id":%q,"warehouse":%q,"date":%q}`, run, warehouse, date)
	if _, err := d.js.Publish(ctx, events.RunStartSubject, []byte(body)); err != nil {
		return fmt.Errorf("starting run %s: %w", run, err)
	}
	return nil
}

func (d *dev) artifactBytes(ctx context.Context) (int64, error) {
	obj, err := d.js.ObjectStore(ctx, assets.ObjectArtifacts)
	if err != nil {
		return 0, err
	}
	st, err := obj.Status(ctx)
	if err != nil {
		return 0, err
	}
	return int64(st.Size()), nil
}

// watcher follows every run's record, noting when each is done and how large it grew.
type watcher struct {
	store    *kc.Store // the night's, checked as the services read it
	w        jetstream.KeyWatcher
	maxSize  map[string]int
	links    kc.Links // the revision seen last of each run (kvcheckpoint.DecodeWatched)
	lastSize map[string]int
	last     map[string]*kc.Record
	doneAt   map[string]time.Time
}

func (d *dev) watch(ctx context.Context) (*watcher, error) {
	store, err := night.OpenRuns(ctx, d.js)
	if err != nil {
		return nil, err
	}
	w, err := store.KV().WatchAll(ctx)
	if err != nil {
		return nil, err
	}
	return &watcher{store: store, w: w, maxSize: map[string]int{}, lastSize: map[string]int{}, last: map[string]*kc.Record{}, doneAt: map[string]time.Time{}}, nil
}

func (w *watcher) stop() { _ = w.w.Stop() }

// until follows the records until every run named is done; it returns the last run's
// record. A run handed over or cancelled is an error.
func (w *watcher) until(ctx context.Context, limit time.Duration, runs ...string) (*kc.Record, error) {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	waiting := map[string]bool{}
	for _, r := range runs {
		if _, done := w.doneAt[r]; !done {
			waiting[r] = true
		}
	}
	for len(waiting) > 0 {
		select {
		case e, ok := <-w.w.Updates():
			if !ok {
				return nil, errors.New("the watch of the runs ended")
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			at := time.Now()
			rec, err := w.store.DecodeWatched(ctx, &w.links, e.Key(), e.Value(), e.Revision())
			if err != nil {
				return nil, fmt.Errorf("run %s: the checkpoint (revision %d) is damaged: %w", e.Key(), e.Revision(), err)
			}
			w.maxSize[e.Key()] = max(w.maxSize[e.Key()], len(e.Value()))
			w.lastSize[e.Key()] = len(e.Value())
			w.last[e.Key()] = rec
			switch rec.Status {
			case kc.Done:
				if _, seen := w.doneAt[e.Key()]; !seen {
					w.doneAt[e.Key()] = at
				}
				delete(waiting, e.Key())
			case kc.HandedOver, kc.Cancelled:
				return rec, fmt.Errorf("run %s is %s%s", e.Key(), rec.Status, why(rec))
			}
		case <-deadline.C:
			return nil, fmt.Errorf("%d runs not done within %s", len(waiting), limit)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return w.last[runs[len(runs)-1]], nil
}

// why names the step that stopped a run and its last error.
func why(rec *kc.Record) string {
	for _, name := range rec.Pipeline {
		if s := rec.Step(name); s.Status == kc.Failed && s.LastError != nil {
			return " in " + name + ": " + *s.LastError
		}
	}
	return ""
}
