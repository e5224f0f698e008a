package service

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/cairnhq/cairn/internal/eventually"
	"github.com/cairnhq/cairn/pkg/assets"
)

// /readyz follows the NATS connection: not ready while starting, ready once the services
// run, not ready while the server is gone, ready again once the client has reconnected.
// /healthz answers throughout. Replies come under the service's own inbox prefix.
func TestReadinessFollowsTheNATSConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true}
	s := startServer(t, opts)
	opts.Port = s.Addr().(*net.TCPAddr).Port // the restart listens where the client reconnects

	t.Setenv("CAIRN_DATA_DIR", t.TempDir())
	t.Setenv("CAIRN_NATS_URL", s.ClientURL())
	t.Setenv("CAIRN_METRICS_ADDR", "127.0.0.1:0")
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	nc, js, err := Connect(c, "supervisor")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if inbox := nc.NewInbox(); !strings.HasPrefix(inbox, "_INBOX.cairn.supervisor.") {
		t.Fatalf("reply inbox %q, want it under _INBOX.cairn.supervisor.", inbox)
	}
	if err := assets.Ensure(ctx, js, c.Assets()); err != nil {
		t.Fatal(err)
	}
	if _, err := RegisterKeys(ctx, js, c, Services()...); err != nil { // as cairn init does
		t.Fatal(err)
	}
	svcCtx, stop := context.WithCancel(ctx)
	defer stop()
	d, err := Open(svcCtx, c, js, quiet)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + d.MetricsAddr.String()
	if code, body := get(t, base+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "starting") {
		t.Fatalf("/readyz before the services run: %d %q, want 503 starting", code, body)
	}
	done := make(chan error, 1)
	go func() { done <- d.RunAll(svcCtx, "supervisor") }()
	waitReady(t, base, http.StatusOK, "ready", done)

	s.Shutdown()
	waitReady(t, base, http.StatusServiceUnavailable, "NATS connection", done)
	if code, _ := get(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz with the server gone: %d, want 200 (the process is alive)", code)
	}

	s = startServer(t, opts)
	waitReady(t, base, http.StatusOK, "ready", done)

	stop()
	if err := <-done; err != nil && ctx.Err() != nil {
		t.Fatalf("RunAll: %v", err)
	}
}

func startServer(t *testing.T, opts *server.Options) *server.Server {
	t.Helper()
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	return s
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitReady polls /readyz until it answers code with a body containing want; the services
// must not stop meanwhile.
func waitReady(t *testing.T, base string, code int, want string, done <-chan error) {
	t.Helper()
	eventually.That(t, time.Minute, fmt.Sprintf("/readyz answers %d %q", code, want), func() error {
		got, body := get(t, base+"/readyz")
		if got == code && strings.Contains(body, want) {
			return nil
		}
		select {
		case err := <-done:
			t.Fatalf("the services stopped: %v", err)
		default:
		}
		return fmt.Errorf("/readyz: %d %q", got, body)
	})
}
