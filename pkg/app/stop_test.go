package app_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/runner"
)

// A stop asked for while Run starts its services (checking the assets, opening the buckets)
// is a clean stop, as one asked for once they run is: Run returns nil, and so does the Close
// of a RunLocal closed at once, as a job's main does when its run was done before it started.
func TestRunStoppedWhileStarting(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	job := app.Job{Name: "stopping", Input: []string{"n"}, Steps: []app.Step{
		app.Compute("double", runner.Func(func(ctx context.Context, a *runner.Attempt, in struct{ N int }) (int, error) {
			return 2 * in.N, nil
		})),
	}}
	local, err := app.RunLocal(ctx, dir, job)
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()

	stopped, stop := context.WithCancel(ctx)
	stop()
	if err := app.Run(stopped, app.Config{JS: local.JS(), Job: job, KeysDir: filepath.Join(dir, "keys")}); err != nil {
		t.Errorf("Run stopped before its services ran: %v, want nil", err)
	}
	if err := local.Close(); err != nil {
		t.Errorf("Close at once: %v, want nil", err)
	}
}
