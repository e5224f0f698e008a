package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// A small transitions run finishes every run with every step verified, and measures both
// Cairn and the floor.
func TestTransitionsSmall(t *testing.T) {
	res, err := Transitions(context.Background(), TransitionsConfig{Runs: 20, Concurrency: 4, Steps: 3, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Transitions != 60 || res.PerSecond <= 0 || res.Floor.Transitions != 120 || res.Floor.PerSecond <= 0 || res.Ratio <= 0 {
		t.Errorf("result %+v", res)
	}
	if res.FloorRecordSized.Transitions != 60 || res.CheckpointBytes == 0 {
		t.Errorf("record-sized floor %+v, checkpoint %d bytes", res.FloorRecordSized, res.CheckpointBytes)
	}
	if res.OneWrite.Transitions != 60 || res.OneWrite.PerSecond <= 0 || res.GroupCommit.Transitions != 60 || res.GroupCommit.Batch < 1 || res.Sharded.Transitions != 60 || res.Sharded.PerSecond <= 0 {
		t.Errorf("ceilings: one write %+v, group commit %+v, sharded %+v", res.OneWrite, res.GroupCommit, res.Sharded)
	}
}

// With a connection and a store per step runner, every run still finishes with every step
// verified once (checkRuns), each step reading the record its predecessor wrote.
func TestTransitionsSmallSeparate(t *testing.T) {
	res, err := Transitions(context.Background(), TransitionsConfig{Runs: 12, Concurrency: 4, Steps: 3, Separate: true, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Separate || res.Transitions != 36 || res.PerSecond <= 0 || res.Conflicts != 0 {
		t.Errorf("result %+v", res)
	}
}

// On three servers clustered on loopback, Cairn's streams and the floor's have 3 replicas.
func TestTransitionsSmallCluster(t *testing.T) {
	res, err := Transitions(context.Background(), TransitionsConfig{Runs: 8, Concurrency: 4, Steps: 2, Cluster: 3, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Nodes != 3 || res.Transitions != 16 || res.PerSecond <= 0 || res.Floor.Transitions != 32 || res.Floor.PerSecond <= 0 {
		t.Errorf("result %+v", res)
	}
	if res.OneWrite.Transitions != 0 || res.GroupCommit.Transitions != 0 || res.Sharded.Transitions != 0 {
		t.Errorf("ceilings measured on three servers: one write %+v, group commit %+v, sharded %+v", res.OneWrite, res.GroupCommit, res.Sharded)
	}
	// A lease-free step that changed nothing outside stores its commit in the record alone.
	if res.Stored.AuditEvents != 0 || res.Stored.Checkpoints != 1.5 {
		t.Errorf("stored per transition %+v, want 1.5 checkpoints and no audit event", res.Stored)
	}
}

func TestTransitionsRefusesRecordsTooLarge(t *testing.T) {
	_, err := Transitions(context.Background(), TransitionsConfig{Runs: 1, Steps: 40, Dir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "too large") {
		t.Errorf("40 steps of 200-byte outputs: %v, want the checkpoint named too large", err)
	}
}

func TestQuantileAndMedian(t *testing.T) {
	xs := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if q := quantile(xs, 0.5); q != 5 {
		t.Errorf("p50 = %v, want 5", q)
	}
	if q := quantile(xs, 0.99); q != 10 {
		t.Errorf("p99 = %v, want 10", q)
	}
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median = %v, want 2", m)
	}
	if m := median([]float64{4, 1, 2, 3}); m != 2.5 {
		t.Errorf("median = %v, want 2.5", m)
	}
}

// The figures are set against the targets from the measurements' medians.
func TestFigures(t *testing.T) {
	tr := func(rate, floor float64) TransitionsResult {
		return TransitionsResult{PerSecond: rate, Floor: Floor{PerSecond: floor}, Ratio: rate / floor}
	}
	s := &Suite{
		Transitions:     []TransitionsResult{tr(6000, 15000), tr(4000, 15000), tr(7000, 15000)},
		TransitionsSync: []TransitionsResult{tr(4000, 2000)}, // 2.0×
		Night:           []NightResult{{TotalSeconds: 0.4}, {TotalSeconds: 0.6}, {TotalSeconds: 0.45}},
		Resume:          []ResumeResult{{ContinueSeconds: 1.2}},
		Many:            &ManyResult{RunsPerSec: 10, PeakRSSBytes: 100 * mib},
		Errors:          map[string]string{},
	}
	s.Figures = s.figures(SuiteConfig{ManyRuns: 1000, ManyInvoices: 30})
	met := map[string]bool{}
	for _, f := range s.Figures {
		met[f.Name] = f.Met
	}
	want := map[string]bool{
		"transitions/s, default sync, K=1000, C=16, S=10":                        true, // median 6,000/s, 40%
		"transitions/s, sync-always":                                             true,
		"reference night, services up → done":                                    true, // median 0.45 s
		"resume after the entry-24 crash: process start → post-ledger continues": false,
		"big night (100,000 invoices, 12,000 mismatches)":                        false, // not run
		"many nights (1000 runs × 30 invoices)":                                  true,
	}
	for name, w := range want {
		if got, ok := met[name]; !ok || got != w {
			t.Errorf("%s: met %v (present %v), want %v", name, got, ok, w)
		}
	}
	var md bytes.Buffer
	s.Markdown(&md)
	if !strings.Contains(md.String(), "| figure | target | measured | met |") {
		t.Errorf("markdown:\n%s", md.String())
	}
}
