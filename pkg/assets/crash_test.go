package assets_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
)

// serve starts a nats-server storing in dir and connects to it; stop shuts it down.
func serve(t *testing.T, dir string) (js jetstream.JetStream, stop func()) {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	if js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	return js, func() { nc.Close(); s.Shutdown(); s.WaitForShutdown() }
}

// A server killed before it wrote its latest messages comes back with a consumer that has
// delivered beyond its stream's last message. Such a consumer skips every message stored
// again under those sequences: the step's event the supervisor publishes after the crash is
// never delivered, and the run waits until its stall timeout (TestKilledEightTimesDuringABigNight
// hung so at update-stock). Check names it; Ensure (cairn init, cairn dev) resets the
// consumer, and the event published after the crash is delivered.
func TestEnsureResetsAConsumerAheadOfItsStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	js, stop := serve(t, dir)
	ensure(t, js, config())
	sp := assets.Default
	for i := range 3 {
		if _, err := js.Publish(ctx, sp.Step("fetch", "run-"+string(rune('a'+i))), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	c, err := js.Consumer(ctx, assets.StreamSteps, "fetch")
	if err != nil {
		t.Fatal(err)
	}
	batch, err := c.Fetch(3, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range batch.Messages() {
		n++ // delivered, never acked: their worker dies with the server
	}
	if n != 3 {
		t.Fatalf("fetched %d events, want 3", n)
	}
	stop()
	// The crash: the stream's messages were never written, the consumer's state was.
	msgs := filepath.Join(dir, "jetstream", "$G", "streams", assets.StreamSteps, "msgs")
	if err := os.RemoveAll(msgs); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(msgs, 0o755); err != nil {
		t.Fatal(err)
	}
	js, stop = serve(t, dir)
	defer stop()
	if info, err := js.Consumer(ctx, assets.StreamSteps, "fetch"); err != nil || info.CachedInfo().Delivered.Stream != 3 {
		t.Fatalf("after the crash: %v, %v; want a consumer that delivered up to sequence 3", info, err)
	}
	err = assets.Check(ctx, js, config())
	if err == nil || !strings.Contains(err.Error(), "beyond the stream's last") {
		t.Fatalf("Check: %v; want the consumer ahead of its stream named", err)
	}
	changed, err := assets.EnsureReport(ctx, js, config())
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if len(changed) != 1 || !strings.Contains(changed[0], "consumer fetch on CAIRN_STEPS reset") {
		t.Fatalf("Ensure reported %q; want the fetch consumer's reset", changed)
	}
	// The event published after the crash (the supervisor's republish) is delivered.
	if _, err := js.Publish(ctx, sp.Step("fetch", "run-a"), []byte(`{"again":true}`)); err != nil {
		t.Fatal(err)
	}
	c, err = js.Consumer(ctx, assets.StreamSteps, "fetch")
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		t.Fatalf("the event published after the crash was not delivered: %v", err)
	}
	if string(m.Data()) != `{"again":true}` || m.Subject() != sp.Step("fetch", "run-a") {
		t.Fatalf("delivered %s %s", m.Subject(), m.Data())
	}
	if err := assets.Check(ctx, js, config()); err != nil {
		t.Fatalf("Check after the reset: %v", err)
	}
}
