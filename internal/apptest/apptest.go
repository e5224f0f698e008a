// Package apptest hosts a pipeline for a test, as a process of all its services would.
package apptest

import (
	"context"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/identity"
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
				t.Errorf("pipeline %s: %v", cfg.Pipeline.Name+cfg.Job.Name, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// Keys makes the default space's cairn-keys on js with name's key registered and the seal
// recorded, and returns name's signer: what a system that checks its callers (ledger-api)
// reads, with no night.
func Keys(t testing.TB, js jetstream.JetStream, name string) *identity.Signer {
	t.Helper()
	kv, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: assets.Default.Bucket(identity.Bucket)})
	if err != nil {
		t.Fatal(err)
	}
	seed, err := identity.NewSeed()
	if err != nil {
		t.Fatal(err)
	}
	sg, err := identity.NewSigner(name, seed)
	if err != nil {
		t.Fatal(err)
	}
	if err := identity.Register(t.Context(), kv, sg.Name(), sg.PublicKey()); err != nil {
		t.Fatal(err)
	}
	if _, err := identity.SealOnce(t.Context(), kv, identity.Seal{}); err != nil {
		t.Fatal(err)
	}
	return sg
}
