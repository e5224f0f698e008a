package bench

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
)

// The night, the resume and a few nights at once, with a real `cairn dev`: each finishes,
// matches the ground truth, and reports its figures.
func TestNightResumeMany(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cairn and runs nights")
	}
	bin := filepath.Join(t.TempDir(), "cairn")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/cairn").CombinedOutput(); err != nil {
		t.Fatalf("building cairn: %v\n%s", err, out)
	}
	ctx := context.Background()
	n, err := Night(ctx, NightConfig{Bin: bin, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if n.LedgerRows != 40 || n.TotalSeconds <= 0 || n.CheckpointBytes == 0 || n.ArtifactBytes == 0 || len(n.Steps) != 9 {
		t.Errorf("night %+v", n)
	}
	r, err := Resume(ctx, ResumeConfig{Bin: bin, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if r.LedgerRows != 40 || r.Restarts < 1 || r.ContinueSeconds <= 0 || r.DoneSeconds < r.ContinueSeconds {
		t.Errorf("resume %+v", r)
	}
	m, err := Many(ctx, ManyConfig{Bin: bin, Runs: 3, Invoices: 10, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if m.LedgerRows != 12 || m.RunsPerSec <= 0 || m.P99Seconds < m.P50Seconds {
		t.Errorf("many %+v", m)
	}
}
