package service

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairnhq/cairn/internal/apptest"
	"github.com/cairnhq/cairn/internal/eventually"
	"github.com/cairnhq/cairn/internal/ledgerapi"
	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/pkg/httpidem"
	"github.com/cairnhq/cairn/pkg/identity"
)

// A wrong setting of the ledger API is ErrSetting naming its variable.
func TestLedgerAPISettings(t *testing.T) {
	for _, tc := range []struct{ name, value, variable string }{
		{"CAIRN_LEDGER_API_ADDR", "", "CAIRN_LEDGER_API_ADDR"},
		{"CAIRN_LEDGER_API_ADDR", "localhost", "CAIRN_LEDGER_API_ADDR"},
		{"CAIRN_LEDGER_API_ADDR", "127.0.0.1:http", "CAIRN_LEDGER_API_ADDR"},
		{"CAIRN_LEDGER_API_ADDR", "127.0.0.1:70000", "CAIRN_LEDGER_API_ADDR"},
		{"CAIRN_LEDGER_API_KEY_TTL", "10s", "CAIRN_LEDGER_API_KEY_TTL"},
		{"CAIRN_LEDGER_API_KEY_TTL", "9000h", "CAIRN_LEDGER_API_KEY_TTL"},
		{"CAIRN_LEDGER_DSN", "mysql://x", "CAIRN_LEDGER_DSN"},
		{"CAIRN_NATS_URL", "", "CAIRN_NATS_URL"},
		{"CAIRN_NATS_URL", "http://nats:4222", "CAIRN_NATS_URL"},
		{"CAIRN_NATS_CREDS", "/nonexistent/ledger-api.creds", "CAIRN_NATS_CREDS"},
		{"CAIRN_LEDGER_API_SKEW", "0s", "CAIRN_LEDGER_API_SKEW"},
		{"CAIRN_LEDGER_API_READ_HEADER_TIMEOUT", "0s", "CAIRN_LEDGER_API_READ_HEADER_TIMEOUT"},
		{"CAIRN_LEDGER_API_READ_TIMEOUT", "-1s", "CAIRN_LEDGER_API_READ_TIMEOUT"},
		{"CAIRN_LEDGER_API_WRITE_TIMEOUT", "0s", "CAIRN_LEDGER_API_WRITE_TIMEOUT"},
		{"CAIRN_LEDGER_API_IDLE_TIMEOUT", "9000h", "CAIRN_LEDGER_API_IDLE_TIMEOUT"},
		{"CAIRN_LEDGER_API_MAX_HEADER_BYTES", "100", "CAIRN_LEDGER_API_MAX_HEADER_BYTES"},
		{"CAIRN_LEDGER_API_MAX_BODY", "1073741824", "CAIRN_LEDGER_API_MAX_BODY"},
	} {
		t.Run(tc.name+"="+tc.value, func(t *testing.T) {
			t.Setenv("CAIRN_LEDGER_API_ADDR", "127.0.0.1:0")
			t.Setenv("CAIRN_NATS_URL", "nats://127.0.0.1:4222")
			t.Setenv("CAIRN_DATA_DIR", t.TempDir())
			t.Setenv(tc.name, tc.value)
			_, err := LoadLedgerAPI()
			if !errors.Is(err, ErrSetting) || !strings.Contains(err.Error(), tc.variable) {
				t.Fatalf("LoadLedgerAPI: %v, want ErrSetting naming %s", err, tc.variable)
			}
		})
	}
	t.Run("defaults", func(t *testing.T) {
		dir := t.TempDir()
		t.Setenv("CAIRN_LEDGER_API_ADDR", "127.0.0.1:0")
		t.Setenv("CAIRN_NATS_URL", "nats://127.0.0.1:4222")
		t.Setenv("CAIRN_DATA_DIR", dir)
		c, err := LoadLedgerAPI()
		if err != nil {
			t.Fatal(err)
		}
		if c.KeyTTL != 24*time.Hour || string(c.LedgerDSN) != "sqlite:"+filepath.Join(dir, "ledger.db") ||
			c.ReadHeaderTimeout != 5*time.Second || c.ReadTimeout != 30*time.Second || c.WriteTimeout != time.Minute ||
			c.IdleTimeout != 2*time.Minute || c.MaxHeaderBytes != 64<<10 || c.MaxBody != 1<<20 || c.Skew != 5*time.Minute {
			t.Fatalf("defaults: %+v", c)
		}
	})
}

// ledgerKeys is a NATS server with cairn-keys holding post-ledger's key, and its signer.
func ledgerKeys(t *testing.T) (jetstream.JetStream, *identity.Signer) {
	t.Helper()
	js := natstest.JetStream(t)
	return js, registerKeys(t, js)
}

// registerKeys makes cairn-keys on js with post-ledger's key, and returns its signer.
func registerKeys(t *testing.T, js jetstream.JetStream) *identity.Signer {
	t.Helper()
	return apptest.Keys(t, js, ledgerapi.CallerPostLedger)
}

// ledgerAPIConfig is a valid configuration serving on loopback over a SQLite file.
func ledgerAPIConfig(t *testing.T) LedgerAPIConfig {
	c := LedgerAPIConfig{Addr: "127.0.0.1:0", KeyTTL: time.Hour, DataDir: filepath.Join(t.TempDir(), "data"), StopGrace: 5 * time.Second,
		NATSURL: "nats://127.0.0.1:4222", InboxPrefix: "_INBOX.cairn", Skew: 5 * time.Minute,
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute,
		MaxHeaderBytes: 64 << 10, MaxBody: 1 << 20}
	c.LedgerDSN = Credentials("sqlite:" + filepath.Join(c.DataDir, "ledger.db"))
	return c
}

// runLedgerAPI runs the service with c until the test ends and returns its address.
// keysOpen waits for the service to have read the callers' keys, as a client retrying a
// 503 does.
func runLedgerAPIOpen(t *testing.T, c LedgerAPIConfig, js jetstream.JetStream) string {
	t.Helper()
	addr := runLedgerAPI(t, c, js, quiet)
	eventually.That(t, time.Minute, "the callers' keys read", func() error {
		resp, err := http.Get("http://" + addr + "/v1/entries/k")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			return errors.New("503")
		}
		return nil
	})
	return addr
}

func runLedgerAPI(t *testing.T, c LedgerAPIConfig, js jetstream.JetStream, log *slog.Logger) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- RunLedgerAPI(ctx, c, js, log, func(a net.Addr) { addrs <- a }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("RunLedgerAPI after stop: %v", err)
		}
	})
	select {
	case a := <-addrs:
		return a.String()
	case err := <-done:
		done <- err
		t.Fatalf("RunLedgerAPI before ready: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("not ready within a minute")
	}
	return ""
}

// An address the service cannot listen on stops it at start with ErrSetting naming
// CAIRN_LEDGER_API_ADDR, before it is ready.
func TestLedgerAPIAddrInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	js, _ := ledgerKeys(t)
	c := ledgerAPIConfig(t)
	c.Addr = l.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = RunLedgerAPI(ctx, c, js, quiet, func(net.Addr) { t.Error("ready on an address in use") })
	if !errors.Is(err, ErrSetting) || !strings.Contains(err.Error(), "CAIRN_LEDGER_API_ADDR") {
		t.Fatalf("RunLedgerAPI: %v, want ErrSetting naming CAIRN_LEDGER_API_ADDR", err)
	}
}

// Until the callers' keys can be read (no cairn-keys yet: cairn init not run) every request
// is 503; once they are registered, the API serves.
func TestLedgerAPIWaitsForKeys(t *testing.T) {
	js := natstest.JetStream(t)
	addr := runLedgerAPI(t, ledgerAPIConfig(t), js, quiet)
	get := func(sg *identity.Signer) int {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+"/v1/entries/k1", nil)
		if sg != nil {
			httpidem.Sign(req, nil, sg, time.Now(), ledgerapi.EpochHeader)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := get(nil); s != http.StatusServiceUnavailable {
		t.Fatalf("before the keys: %d, want 503", s)
	}
	sg := registerKeys(t, js)
	// The service tries again every few seconds.
	eventually.That(t, time.Minute, "the API serves after the keys' registration", func() error {
		if s := get(sg); s != http.StatusNotFound {
			return fmt.Errorf("%d, want 404", s)
		}
		return nil
	})
}

// The service serves once ready, answers an unsigned request 401 and a signed one, and
// stops cleanly when its context ends.
func TestLedgerAPIRunsAndStops(t *testing.T) {
	js, sg := ledgerKeys(t)
	addr := runLedgerAPIOpen(t, ledgerAPIConfig(t), js)
	get := func(sign bool) int {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+"/v1/entries/k1", nil)
		if sign {
			httpidem.Sign(req, nil, sg, time.Now(), ledgerapi.EpochHeader)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := get(false); s != http.StatusUnauthorized {
		t.Fatalf("unsigned GET: %d, want 401", s)
	}
	if s := get(true); s != http.StatusNotFound {
		t.Fatalf("signed GET of no entry: %d, want 404", s)
	}
}

// A client that sends its headers and then trickles (or holds) its body is cut off at
// CAIRN_LEDGER_API_READ_TIMEOUT, one that never ends its headers at the header timeout;
// a body over CAIRN_LEDGER_API_MAX_BODY is 413 naming the limit.
func TestLedgerAPIBounds(t *testing.T) {
	js, sg := ledgerKeys(t)
	c := ledgerAPIConfig(t)
	c.ReadHeaderTimeout, c.ReadTimeout, c.MaxBody = 500*time.Millisecond, time.Second, 4096
	addr := runLedgerAPIOpen(t, c, js)
	for name, start := range map[string]string{
		"slow body":    "POST /v1/entries HTTP/1.1\r\nHost: ledger\r\nContent-Length: 100000\r\n\r\n{",
		"slow headers": "POST /v1/entries HTTP/1.1\r\nHost: ledger\r\nX-Slow: ",
	} {
		t.Run(name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, start); err != nil {
				t.Fatal(err)
			}
			// Well past the timeouts: a server without them holds the connection open.
			conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			_, err = io.Copy(io.Discard, conn)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the server still held the connection after 20s")
			}
		})
	}
	body := bytes.Repeat([]byte("x"), 5000)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+addr+"/v1/entries", bytes.NewReader(body))
	req.Header.Set(httpidem.KeyHeader, `"k1"`)
	req.Header.Set(httpidem.DefaultRunHeader, "run-1")
	req.Header.Set(httpidem.DefaultTokenHeader, "1")
	httpidem.Sign(req, body, sg, time.Now(), ledgerapi.EpochHeader)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "4096") {
		t.Fatalf("a body of 5000 bytes: %d %s, want 413 naming 4096", resp.StatusCode, b)
	}
}

// The request counter's method label holds the methods HTTP names and "other": a client's
// made-up methods add no series.
func TestLedgerAPIMethodLabel(t *testing.T) {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "test_requests_total"}, []string{"method", "code"})
	srv := httptest.NewServer(counted(http.NotFoundHandler(), requests))
	t.Cleanup(srv.Close)
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	for i := range 50 {
		method := fmt.Sprintf("M%d%s", i, strings.Repeat("X", 1000))
		if _, err := fmt.Fprintf(conn, "%s / HTTP/1.1\r\nHost: ledger\r\n\r\n", method); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(requests)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "method" {
					series[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	if len(series) != 2 || series["other"] != 50 || series["GET"] != 1 {
		t.Fatalf("series %v after 50 made-up methods and a GET, want other 50 and GET 1", series)
	}
}

// The DSN the service prints at start shows no password, in user:pass@ or in the query.
func TestLedgerAPIPrintsNoPassword(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	dsn := Credentials("postgres://ledger_api:pw-in-user@db:5432/ledger?sslmode=disable&password=pw-in-query&sslpassword=pw-ssl")
	log.Info("serving the ledger", slog.Any("dsn", dsn))
	fmt.Fprintf(&buf, "%v %s %q %+v", dsn, dsn, dsn, LedgerAPIConfig{LedgerDSN: dsn})
	for _, pw := range []string{"pw-in-user", "pw-in-query", "pw-ssl"} {
		if strings.Contains(buf.String(), pw) {
			t.Fatalf("printed %s: %s", pw, buf.String())
		}
	}
	if !strings.Contains(buf.String(), "sslmode=disable") || !strings.Contains(buf.String(), "db:5432/ledger") {
		t.Fatalf("the DSN redacted past use: %s", buf.String())
	}
	if err := scrubbed(errors.New("connecting with password=pw-in-query: refused"), dsn.passwords()...); strings.Contains(err.Error(), "pw-in-") {
		t.Fatalf("an error kept the password: %v", err)
	}
}
