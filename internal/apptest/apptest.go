// Package apptest hosts a pipeline for a test, as a process of all its services would.
package apptest

import (
	"context"
	"sync"
	"testing"

	"github.com/cairnhq/cairn/pkg/app"
)

// Host makes cfg's assets and registers its keys (app.Init), then runs every service of it
// (app.Run) until stop is called or the test ends; a service that ended with an error fails
// the test then.
func Host(ctx context.Context, t testing.TB, cfg app.Config) (stop func()) {
	t.Helper()
	if err := app.Init(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	running, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(running, cfg) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("pipeline %s: %v", cfg.Pipeline.Name, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
