package app_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/assets"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// greeting is the ExampleRun job under another name.
func greeting(js jetstream.JetStream, name, keys string) app.Config {
	job := greet
	job.Name = name
	return app.Config{JS: js, KeysDir: keys, Job: job}
}

// Two pipelines with the same step names, runs of the same run id and services in one
// process share one NATS: each has its own streams, durables, buckets and subjects, and
// each run ends with its own input's answer.
func TestTwoPipelinesOnOneNATS(t *testing.T) {
	dir := t.TempDir()
	srv, err := app.Embedded("spaces", "127.0.0.1", -1, filepath.Join(dir, "nats"))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	names := map[string]string{"alpha": "ada", "beta": "bob"}
	running, stop := context.WithCancel(ctx)
	done := make(chan error, len(names))
	for p := range names {
		cfg := greeting(js, p, filepath.Join(dir, "keys-"+p))
		if err := app.Init(ctx, cfg); err != nil {
			t.Fatalf("init %s: %v", p, err)
		}
		go func() { done <- app.Run(running, cfg) }()
	}
	for p, who := range names {
		if err := app.Start(ctx, js, p, "r-1", map[string]any{"name": who}); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{"alpha": `"ADA!"`, "beta": `"BOB!"`}
	for p := range names {
		rec, err := app.Wait(ctx, js, p, "r-1")
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if rec.Status != kc.Done || string(rec.Steps["shout"].Output.Inline) != want[p] {
			t.Errorf("%s's r-1: %s, shout %s; want done, %s", p, rec.Status, rec.Steps["shout"].Output.Inline, want[p])
		}
	}
	stop()
	for range names {
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}

	// Every asset is the pipeline's own, and the default space (the reference night's) has none.
	for p := range names {
		sp := assets.MustSpace(p)
		for _, c := range (assets.Config{Space: sp, Steps: []string{"read", "shout"}}).Consumers() {
			if _, err := js.Consumer(ctx, c.Stream, c.Config.Durable); err != nil {
				t.Errorf("%s: durable %s on %s: %v", p, c.Config.Durable, c.Stream, err)
			}
		}
		memo, err := js.KeyValue(ctx, sp.Bucket(assets.BucketMemo))
		if err != nil {
			t.Fatal(err)
		}
		keys, _ := memo.Keys(ctx)
		if want := []string{"r-1.shout." + names[p]}; !slices.Equal(keys, want) {
			t.Errorf("%s's memo keys %v, want %v", p, keys, want)
		}
	}
	if _, err := js.Stream(ctx, assets.StreamRuns); err == nil {
		t.Errorf("stream %s exists: a hosted pipeline made the default space's assets", assets.StreamRuns)
	}
	regs, err := app.All(ctx, js)
	if err != nil || len(regs) != 2 || regs[0].Name != "alpha" || regs[1].Name != "beta" {
		t.Errorf("registrations %+v (%v), want alpha and beta", regs, err)
	}
}

// A pipeline whose name cannot name its space is refused by Init, naming the problem.
func TestPipelineNameRefused(t *testing.T) {
	for _, name := range []string{"Invoice-Reconciliation", "runs", "a-b", ""} {
		cfg := greeting(nil, name, t.TempDir())
		if err := app.Init(t.Context(), cfg); err == nil {
			t.Errorf("pipeline %q: Init accepted it", name)
		}
	}
	if _, err := assets.SpaceOf("runs"); err == nil {
		t.Error(`SpaceOf("runs") accepted a reserved name`)
	}
}

// A pipeline named as a service, a reply prefix or a NATS user of the account is refused by
// Init before it makes anything, the error naming what it would meet (a pipeline called cli
// took the operator's CLI's replies, _INBOX.cairn.cli); so is a registration of such a name
// read back (one an earlier release made).
func TestPipelineNameClashRefused(t *testing.T) {
	srv, err := app.Embedded("clash", "127.0.0.1", -1, filepath.Join(t.TempDir(), "nats"))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	for name, clash := range map[string]string{
		"cli": "_INBOX.cairn.cli", "supervisor": "_INBOX.cairn.supervisor", "fetch": "_INBOX.cairn.fetch",
		"match": "_INBOX.cairn.match", "compensator": "_INBOX.cairn.compensator", "owner": "cairn.owner.",
		"admin": "NATS user", "debit": "debit-notes", "init": "_INBOX.cairn.init",
	} {
		err := app.Init(t.Context(), greeting(js, name, t.TempDir()))
		if !errors.Is(err, assets.ErrReservedName) || !strings.Contains(err.Error(), clash) {
			t.Errorf("Init of pipeline %q: %v; want it refused as reserved, naming %s", name, err, clash)
		}
		if _, err := (app.Registration{Name: name}).Assets(); !errors.Is(err, assets.ErrReservedName) {
			t.Errorf("registration %q read back: %v, want it refused as reserved", name, err)
		}
	}
	lister := js.StreamNames(t.Context())
	for name := range lister.Name() {
		t.Errorf("stream %s made for a refused pipeline", name)
	}
	if err := lister.Err(); err != nil {
		t.Fatal(err)
	}
}
