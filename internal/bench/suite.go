package bench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// SuiteConfig says how All runs every measurement.
type SuiteConfig struct {
	Bin    string // the cairn binary: each measurement runs as `cairn bench <what> --json`
	Repeat int    // transitions, night and resume run this many times, medians reported; default 3
	// ManyRuns and ManyInvoices size the many-nights measurement; default 1000 × 30.
	ManyRuns, ManyInvoices int
	Big                    bool      // also the big night (100,000 invoices) and its 10,000-invoice reference
	Log                    io.Writer // progress, one line a measurement; may be nil
}

// Suite is every measurement of one `make bench`, with the figures against their targets.
type Suite struct {
	Machine     Machine `json:"machine"`
	StartedAt   string  `json:"started_at"`
	WallSeconds float64 `json:"wall_seconds"`
	LoadBefore  string  `json:"load_average_before"` // /proc/loadavg: other work on the machine
	LoadAfter   string  `json:"load_average_after"`
	Repeat      int     `json:"repeat"`

	Transitions     []TransitionsResult `json:"transitions"`
	TransitionsSync []TransitionsResult `json:"transitions_sync_always"`
	// The same at default sync with a connection and a store per step runner (--separate).
	TransitionsSeparate []TransitionsResult `json:"transitions_separate"`
	// The same on three servers clustered on loopback, replicas 3.
	TransitionsCluster     []TransitionsResult `json:"transitions_cluster_3"`
	TransitionsClusterSync []TransitionsResult `json:"transitions_cluster_3_sync_always"`
	Night                  []NightResult       `json:"night"`
	Resume                 []ResumeResult      `json:"resume"`
	Many                   *ManyResult         `json:"many,omitempty"`
	Night10k               *NightResult        `json:"night_10000,omitempty"`
	BigNight               *NightResult        `json:"big_night,omitempty"`
	// Errors are the measurements that failed, by name, with their error.
	Errors  map[string]string `json:"errors,omitempty"`
	Figures []Figure          `json:"figures"`
}

// Figure is one line of the targets table.
type Figure struct {
	Name     string `json:"name"`
	Target   string `json:"target"`
	Measured string `json:"measured"`
	Met      bool   `json:"met"`
	Command  string `json:"command"`
}

// All runs every measurement at WORKLOAD.md's sizes, each in a process of its own (so that
// each peak RSS is its own), and sets the figures against the targets of issue 8.
func All(ctx context.Context, c SuiteConfig) (*Suite, error) {
	c.Repeat = cmp.Or(c.Repeat, 3)
	c.ManyRuns = cmp.Or(c.ManyRuns, 1000)
	c.ManyInvoices = cmp.Or(c.ManyInvoices, 30)
	if c.Log == nil {
		c.Log = io.Discard
	}
	s := &Suite{Machine: ThisMachine(), StartedAt: time.Now().UTC().Format(time.RFC3339), LoadBefore: loadAverage(), Repeat: c.Repeat, Errors: map[string]string{}}
	began := time.Now()
	run := func(name string, into any, args ...string) bool {
		fmt.Fprintf(c.Log, "cairn bench %s\n", strings.Join(args, " "))
		err := c.child(ctx, into, args...)
		if err != nil {
			s.Errors[name] = err.Error()
			fmt.Fprintf(c.Log, "  failed: %v\n", err)
		}
		return err == nil
	}
	for i := range c.Repeat {
		var def, sync TransitionsResult
		if run(fmt.Sprintf("transitions[%d]", i), &def, "transitions", "--runs", "1000", "--concurrency", "16", "--steps", "10") {
			s.Transitions = append(s.Transitions, def)
		}
		if run(fmt.Sprintf("transitions_sync_always[%d]", i), &sync, "transitions", "--runs", "1000", "--concurrency", "16", "--steps", "10", "--sync-always") {
			s.TransitionsSync = append(s.TransitionsSync, sync)
		}
		var sep TransitionsResult
		if run(fmt.Sprintf("transitions_separate[%d]", i), &sep, "transitions", "--runs", "1000", "--concurrency", "16", "--steps", "10", "--separate") {
			s.TransitionsSeparate = append(s.TransitionsSeparate, sep)
		}
	}
	for i := range c.Repeat {
		var def, sync TransitionsResult
		if run(fmt.Sprintf("transitions_cluster_3[%d]", i), &def, "transitions", "--runs", "1000", "--concurrency", "16", "--steps", "10", "--cluster", "3") {
			s.TransitionsCluster = append(s.TransitionsCluster, def)
		}
		if run(fmt.Sprintf("transitions_cluster_3_sync_always[%d]", i), &sync, "transitions", "--runs", "1000", "--concurrency", "16", "--steps", "10", "--cluster", "3", "--sync-always") {
			s.TransitionsClusterSync = append(s.TransitionsClusterSync, sync)
		}
	}
	for i := range c.Repeat {
		var n NightResult
		if run(fmt.Sprintf("night[%d]", i), &n, "night") {
			s.Night = append(s.Night, n)
		}
		var r ResumeResult
		if run(fmt.Sprintf("resume[%d]", i), &r, "resume") {
			s.Resume = append(s.Resume, r)
		}
	}
	s.Many = &ManyResult{}
	run("many", s.Many, "many", "--runs", fmt.Sprint(c.ManyRuns), "--invoices", fmt.Sprint(c.ManyInvoices))
	if c.Big {
		s.Night10k, s.BigNight = &NightResult{}, &NightResult{}
		run("night_10000", s.Night10k, "night", "--invoices", "10000", "--mismatches", "1200")
		run("big_night", s.BigNight, "night", "--invoices", "100000", "--mismatches", "12000")
	}
	s.WallSeconds = time.Since(began).Seconds()
	s.LoadAfter = loadAverage()
	s.Figures = s.figures(c)
	return s, nil
}

// child runs `cairn bench args... --json` and decodes its object into into; a failed
// measurement still decodes what it measured, and its error is returned.
func (c SuiteConfig) child(ctx context.Context, into any, args ...string) error {
	cmd := exec.CommandContext(ctx, c.Bin, append(append([]string{"bench"}, args...), "--json")...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	runErr := cmd.Run()
	if out.Len() > 0 {
		if err := json.Unmarshal(out.Bytes(), into); err != nil && runErr == nil {
			return fmt.Errorf("reading its JSON: %w", err)
		}
	}
	if runErr != nil {
		return fmt.Errorf("%w: %s", runErr, strings.TrimSpace(errb.String()))
	}
	return nil
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianOf[T any](xs []T, f func(T) float64) float64 {
	vs := make([]float64, len(xs))
	for i, x := range xs {
		vs[i] = f(x)
	}
	return median(vs)
}

const mib = 1 << 20

// ceilings says, as medians against the floor of the same run, what one synced write a
// transition, a group commit of the concurrent writes and one synced write to one of Shards
// buckets could reach at most.
func ceilings(ts []TransitionsResult) string {
	one := medianOf(ts, func(t TransitionsResult) float64 { return safeRatio(t.OneWrite.PerSecond, t.Floor.PerSecond) })
	group := medianOf(ts, func(t TransitionsResult) float64 { return safeRatio(t.GroupCommit.PerSecond, t.Floor.PerSecond) })
	batch := medianOf(ts, func(t TransitionsResult) float64 { return t.GroupCommit.Batch })
	sharded := medianOf(ts, func(t TransitionsResult) float64 { return safeRatio(t.Sharded.PerSecond, t.Floor.PerSecond) })
	return fmt.Sprintf("ceilings: one synced write %.2f×, group commit %.2f× (mean batch %.1f), one synced write to one of %d buckets %.2f×", one, group, batch, Shards, sharded)
}

func (s *Suite) figures(c SuiteConfig) []Figure {
	var out []Figure
	ofN := func(n int) string { return fmt.Sprintf("median of %d", n) }
	if ts := s.Transitions; len(ts) > 0 {
		rate := medianOf(ts, func(t TransitionsResult) float64 { return t.PerSecond })
		floor := medianOf(ts, func(t TransitionsResult) float64 { return t.Floor.PerSecond })
		ratio := medianOf(ts, func(t TransitionsResult) float64 { return t.Ratio })
		cpu := medianOf(ts, func(t TransitionsResult) float64 { return t.CPUMicros })
		fcpu := medianOf(ts, func(t TransitionsResult) float64 { return t.Floor.CPUMicros })
		out = append(out, Figure{Name: "transitions/s, default sync, K=1000, C=16, S=10",
			Target: "≥ 40% of the raw floor measured in the same run",
			Measured: fmt.Sprintf("%.0f/s; raw floor %.0f/s; ratio %.0f%%; CPU %.0f µs a transition (floor's %.0f µs); %s (%s)",
				rate, floor, ratio*100, cpu, fcpu, ceilings(ts), ofN(len(ts))),
			Met: ratio >= 0.40, Command: "cairn bench transitions --runs 1000 --concurrency 16 --steps 10"})
	}
	if ts := s.TransitionsSync; len(ts) > 0 {
		rate := medianOf(ts, func(t TransitionsResult) float64 { return t.PerSecond })
		floor := medianOf(ts, func(t TransitionsResult) float64 { return t.Floor.PerSecond })
		ratio := medianOf(ts, func(t TransitionsResult) float64 { return t.Ratio })
		sized := medianOf(ts, func(t TransitionsResult) float64 { return safeRatio(t.PerSecond, t.FloorRecordSized.PerSecond) })
		out = append(out, Figure{Name: "transitions/s, sync-always",
			Target: "≥ 1.8× the sync-always raw floor measured in the same run",
			Measured: fmt.Sprintf("%.0f/s; raw floor %.0f/s; ratio %.2f× (%.2f× a floor writing record-sized values); %s (%s)",
				rate, floor, ratio, sized, ceilings(ts), ofN(len(ts))),
			Met: ratio >= 1.8, Command: "cairn bench transitions --runs 1000 --concurrency 16 --steps 10 --sync-always"})
	}
	if ts := s.TransitionsSeparate; len(ts) > 0 {
		rate := medianOf(ts, func(t TransitionsResult) float64 { return t.PerSecond })
		floor := medianOf(ts, func(t TransitionsResult) float64 { return t.Floor.PerSecond })
		ratio := medianOf(ts, func(t TransitionsResult) float64 { return t.Ratio })
		cpu := medianOf(ts, func(t TransitionsResult) float64 { return t.CPUMicros })
		out = append(out, Figure{Name: "transitions/s, default sync, one service per step (a connection and a store each)",
			Target: "measured beside its floor (no target)",
			Measured: fmt.Sprintf("%.0f/s; raw floor %.0f/s; ratio %.0f%%; CPU %.0f µs a transition (%s)",
				rate, floor, ratio*100, cpu, ofN(len(ts))),
			Met: true, Command: "cairn bench transitions --runs 1000 --concurrency 16 --steps 10 --separate"})
	}
	for _, cl := range []struct {
		ts   []TransitionsResult
		name string
		flag string
	}{{s.TransitionsCluster, "default sync", ""}, {s.TransitionsClusterSync, "sync-always", " --sync-always"}} {
		if len(cl.ts) == 0 {
			continue
		}
		rate := medianOf(cl.ts, func(t TransitionsResult) float64 { return t.PerSecond })
		floor := medianOf(cl.ts, func(t TransitionsResult) float64 { return t.Floor.PerSecond })
		ratio := medianOf(cl.ts, func(t TransitionsResult) float64 { return t.Ratio })
		out = append(out, Figure{Name: "transitions/s, 3 servers on loopback (replicas 3), " + cl.name,
			Target:   "measured beside its floor (no target)",
			Measured: fmt.Sprintf("%.0f/s; raw floor %.0f/s; ratio %.2f× (%s)", rate, floor, ratio, ofN(len(cl.ts))),
			Met:      true, Command: "cairn bench transitions --runs 1000 --concurrency 16 --steps 10 --cluster 3" + cl.flag})
	}
	if ns := s.Night; len(ns) > 0 {
		total := medianOf(ns, func(n NightResult) float64 { return n.TotalSeconds })
		out = append(out, Figure{Name: "reference night, services up → done", Target: "≤ 0.5 s",
			Measured: fmt.Sprintf("%.3f s; peak RSS %s; checkpoint ≤ %d bytes (%s)", total, MiB(maxOf(ns, func(n NightResult) int64 { return n.PeakRSSBytes })),
				maxOf(ns, func(n NightResult) int { return n.CheckpointBytes }), ofN(len(ns))),
			Met: total <= 0.5, Command: "cairn bench night"})
	}
	if rs := s.Resume; len(rs) > 0 {
		cont := medianOf(rs, func(r ResumeResult) float64 { return r.ContinueSeconds })
		done := medianOf(rs, func(r ResumeResult) float64 { return r.DoneSeconds })
		out = append(out, Figure{Name: "resume after the entry-24 crash: process start → post-ledger continues", Target: "≤ 1 s",
			Measured: fmt.Sprintf("%.3f s (→ done %.3f s) (%s)", cont, done, ofN(len(rs))),
			Met:      cont <= 1, Command: "cairn bench resume"})
	}
	big := Figure{Name: "big night (100,000 invoices, 12,000 mismatches)",
		Target:  "finishes; peak RSS ≤ 512 MiB; checkpoint ≤ 8 KiB; wall time at 100,000 ≤ 12× the time at 10,000",
		Command: "cairn bench night --invoices 100000 --mismatches 12000 (and --invoices 10000 --mismatches 1200)"}
	switch b, ten := s.BigNight, s.Night10k; {
	case b == nil:
		big.Measured = "not run (cairn bench all --big=false)"
	case s.Errors["big_night"] != "":
		big.Measured = fmt.Sprintf("did not finish: %s; peak RSS so far %s, checkpoint ≤ %d bytes", cut(s.Errors["big_night"], 200), MiB(b.PeakRSSBytes), b.CheckpointBytes)
	default:
		ratio := 0.0
		if ten != nil && ten.TotalSeconds > 0 {
			ratio = b.TotalSeconds / ten.TotalSeconds
		}
		big.Measured = fmt.Sprintf("%.1f s (10,000: %.2f s, ×%.1f); peak RSS %s; checkpoint ≤ %d bytes", b.TotalSeconds, ten.TotalSeconds, ratio, MiB(b.PeakRSSBytes), b.CheckpointBytes)
		big.Met = b.PeakRSSBytes <= 512*mib && b.CheckpointBytes <= 8*1024 && ratio > 0 && ratio <= 12
	}
	out = append(out, big)
	if m := s.Many; m != nil {
		f := Figure{Name: fmt.Sprintf("many nights (%d runs × %d invoices)", c.ManyRuns, c.ManyInvoices), Target: "finishes; peak RSS ≤ 512 MiB (at 1,000 runs × 30 invoices)",
			Command: fmt.Sprintf("cairn bench many --runs %d --invoices %d", c.ManyRuns, c.ManyInvoices)}
		if e := s.Errors["many"]; e != "" {
			f.Measured = "did not finish: " + cut(e, 200)
		} else {
			f.Measured = fmt.Sprintf("%.1f runs/s; p50 %.2f s, p99 %.2f s; peak RSS %s", m.RunsPerSec, m.P50Seconds, m.P99Seconds, MiB(m.PeakRSSBytes))
			f.Met = m.PeakRSSBytes <= 512*mib && c.ManyRuns >= 1000
		}
		out = append(out, f)
	}
	return out
}

func maxOf[T any, N int | int64](xs []T, f func(T) N) N {
	var m N
	for _, x := range xs {
		m = max(m, f(x))
	}
	return m
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// Markdown is the README's table of the figures, with the machine they came from.
func (s *Suite) Markdown(w io.Writer) {
	fmt.Fprintf(w, "Measured %s on %s, %d cores, %s, %s (load average %s before, %s after; `make bench` took %.0f s).\n\n",
		s.StartedAt, cmp.Or(s.Machine.CPU, "unknown CPU"), s.Machine.Cores, s.Machine.Memory, s.Machine.Go, s.LoadBefore, s.LoadAfter, s.WallSeconds)
	fmt.Fprintln(w, "| figure | target | measured | met |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, f := range s.Figures {
		met := "no"
		if f.Met {
			met = "yes"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", f.Name, f.Target, strings.ReplaceAll(f.Measured, "|", "/"), met)
	}
}

// Table prints the figures for people.
func (s *Suite) Table(w io.Writer) { s.Markdown(w) }
