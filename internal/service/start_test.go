package service

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/pkg/assets"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// A service refuses to start, saying why, when the server has no JetStream or the assets
// are missing or differ.
func TestServiceRefusesToStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Every file the service makes (its signing seeds among them) under the test's folder,
	// never in the source tree.
	t.Setenv("CAIRN_DATA_DIR", t.TempDir())
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}

	t.Run("no JetStream", func(t *testing.T) {
		s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
		if err != nil {
			t.Fatal(err)
		}
		s.Start()
		defer s.Shutdown()
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatal("nats-server not ready")
		}
		c := c
		c.NATSURL = Credentials(s.ClientURL())
		err = Run(ctx, c, quiet, nil, "match")
		if err == nil || !strings.Contains(err.Error(), "JetStream") {
			t.Fatalf("Run: %v, want an error about JetStream", err)
		}
	})
	t.Run("no assets", func(t *testing.T) {
		js := natstest.JetStream(t)
		_, err := Open(ctx, c, js, quiet)
		if err == nil || !strings.Contains(err.Error(), "cairn init") {
			t.Fatalf("Open: %v, want an error telling to run cairn init", err)
		}
	})
	t.Run("assets differ", func(t *testing.T) {
		js := natstest.JetStream(t)
		if err := assets.Ensure(ctx, js, c.Assets()); err != nil {
			t.Fatal(err)
		}
		if _, err := RegisterKeys(ctx, js, c, Services()...); err != nil { // as cairn init does
			t.Fatal(err)
		}
		other := c
		other.AckWait = 2 * c.AckWait
		_, err := Open(ctx, other, js, quiet)
		if err == nil || !strings.Contains(err.Error(), "cairn init") {
			t.Fatalf("Open: %v, want the mismatch reported", err)
		}
	})
	t.Run("metrics address wrong", func(t *testing.T) {
		js := natstest.JetStream(t)
		if err := assets.Ensure(ctx, js, c.Assets()); err != nil {
			t.Fatal(err)
		}
		if _, err := RegisterKeys(ctx, js, c, Services()...); err != nil { // as cairn init does
			t.Fatal(err)
		}
		c := c
		c.MetricsAddr = "256.0.0.1:1"
		_, err := Open(ctx, c, js, quiet)
		if err == nil || !strings.Contains(err.Error(), "CAIRN_METRICS_ADDR") {
			t.Fatalf("Open: %v, want an error naming CAIRN_METRICS_ADDR", err)
		}
	})
}
