package bench

import (
	"fmt"
	"io"
	"text/tabwriter"
)

func table(w io.Writer, rows [][2]string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
	}
	_ = tw.Flush()
}

// Table prints the result for people.
func (r TransitionsResult) Table(w io.Writer) {
	sync := "default (fsync every 2 minutes)"
	if r.SyncAlways {
		sync = "always (fsync before every ack)"
	}
	rows := [][2]string{
		{"runs × steps, in flight", fmt.Sprintf("%d × %d, %d", r.Runs, r.Steps, r.Concurrency)},
		{"servers", servers(r.Nodes)},
		{"step runners", runnersShape(r.Separate)},
		{"server sync", sync},
		{"durable step transitions", fmt.Sprint(r.Transitions)},
		{"wall time", fmt.Sprintf("%.3f s", r.WallSeconds)},
		{"transitions/s", fmt.Sprintf("%.0f", r.PerSecond)},
		{"raw floor (KV CAS + sync publish)/s", fmt.Sprintf("%.0f (before %.0f, after %.0f)", r.Floor.PerSecond, r.FloorBefore.PerSecond, r.FloorAfter.PerSecond)},
		{"ratio to the floor", fmt.Sprintf("%.2f", r.Ratio)},
		{"floor with record-sized values/s", fmt.Sprintf("%.0f (ratio %.2f)", r.FloorRecordSized.PerSecond, safeRatio(r.PerSecond, r.FloorRecordSized.PerSecond))},
		{"CPU per transition (floor's)", fmt.Sprintf("%.0f µs (%.0f µs)", r.CPUMicros, r.Floor.CPUMicros)},
		{"peak RSS (server and runners)", MiB(r.PeakRSSBytes)},
		{"finished checkpoint", fmt.Sprintf("%d bytes", r.CheckpointBytes)},
		{"checkpoint CAS conflicts", fmt.Sprint(r.Conflicts)},
		{"stored per transition", fmt.Sprintf("%.2f checkpoints, %.2f step events, %.2f audit events, %.2f artifact messages",
			r.Stored.Checkpoints, r.Stored.StepEvents, r.Stored.AuditEvents, r.Stored.ArtifactMessages)},
	}
	if r.OneWrite.Transitions > 0 { // one server only
		rows = append(rows[:10:10], append([][2]string{
			{"ceiling: one synced write (KV CAS alone)/s", fmt.Sprintf("%.0f (%.2f× the floor)", r.OneWrite.PerSecond, safeRatio(r.OneWrite.PerSecond, r.Floor.PerSecond))},
			{"ceiling: group commit (atomic batches)/s", fmt.Sprintf("%.0f (%.2f× the floor; mean batch %.1f)", r.GroupCommit.PerSecond, safeRatio(r.GroupCommit.PerSecond, r.Floor.PerSecond), r.GroupCommit.Batch)},
			{fmt.Sprintf("ceiling: one synced write, %d buckets/s", Shards), fmt.Sprintf("%.0f (%.2f× the floor)", r.Sharded.PerSecond, safeRatio(r.Sharded.PerSecond, r.Floor.PerSecond))},
		}, rows[10:]...)...)
	}
	table(w, rows)
}

// Table prints the result for people.
func (r NightResult) Table(w io.Writer) {
	rows := [][2]string{{"night", fmt.Sprintf("%d invoices, %d mismatches", r.Invoices, r.Mismatches)}}
	for _, s := range r.Steps {
		rows = append(rows, [2]string{"  " + s.Step, fmt.Sprintf("%.3f s", s.Seconds)})
	}
	rows = append(rows,
		[2]string{"services up → done", fmt.Sprintf("%.3f s", r.TotalSeconds)},
		[2]string{"peak RSS (cairn dev)", MiB(r.PeakRSSBytes)},
		[2]string{"checkpoint, largest (last)", fmt.Sprintf("%d bytes (%d)", r.CheckpointBytes, r.FinalCheckpointBytes)},
		[2]string{"artifact bytes", fmt.Sprint(r.ArtifactBytes)},
		[2]string{"ledger rows (= ground truth)", fmt.Sprint(r.LedgerRows)},
		[2]string{"data generation (not timed above)", fmt.Sprintf("%.3f s", r.GenSeconds)},
	)
	table(w, rows)
}

// Table prints the result for people.
func (r ResumeResult) Table(w io.Writer) {
	table(w, [][2]string{
		{"crash", ResumeFault},
		{"new process start → ready", fmt.Sprintf("%.3f s", r.ReadySeconds)},
		{"new process start → post-ledger continues", fmt.Sprintf("%.3f s", r.ContinueSeconds)},
		{"new process start → done", fmt.Sprintf("%.3f s", r.DoneSeconds)},
		{"restarts recorded", fmt.Sprint(r.Restarts)},
		{"ledger rows (= ground truth)", fmt.Sprint(r.LedgerRows)},
		{"peak RSS (second cairn dev)", MiB(r.PeakRSSBytes)},
	})
}

// Table prints the result for people.
func (r ManyResult) Table(w io.Writer) {
	table(w, [][2]string{
		{"nights at once", fmt.Sprintf("%d × %d invoices", r.Runs, r.Invoices)},
		{"wall time", fmt.Sprintf("%.3f s", r.WallSeconds)},
		{"runs/s", fmt.Sprintf("%.1f", r.RunsPerSec)},
		{"run time p50 / p99", fmt.Sprintf("%.3f s / %.3f s", r.P50Seconds, r.P99Seconds)},
		{"peak RSS (cairn dev)", MiB(r.PeakRSSBytes)},
		{"ledger rows (= ground truth)", fmt.Sprint(r.LedgerRows)},
		{"data generation (not timed above)", fmt.Sprintf("%.3f s", r.GenSeconds)},
	})
}

func safeRatio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// servers names the servers a measurement ran on.
func servers(n int) string {
	if n <= 1 {
		return "1"
	}
	return fmt.Sprintf("%d clustered on loopback, replicas %d", n, n)
}

func runnersShape(separate bool) string {
	if separate {
		return "a connection and a store each (one service per step)"
	}
	return "one connection and store (one process hosting every step)"
}
