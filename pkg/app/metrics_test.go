package app_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnhq/cairn/internal/apptest"
	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/runner"
)

// A hosted pipeline's process serves its metrics and readiness as the night's does
// (CAIRN_METRICS_ADDR): /readyz is 200 while its services run, /metrics counts its steps'
// commits once a run is done, and both are gone once it stops.
func TestRunServesMetricsAndReadiness(t *testing.T) {
	js := natsFor(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	served := make(chan net.Addr, 1)
	read := stepFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) { return output("rows"), nil })
	cfg := app.Config{JS: js, KeysDir: filepath.Join(t.TempDir(), "keys"), MetricsAddr: "127.0.0.1:0",
		Serving:  func(a net.Addr) { served <- a },
		Pipeline: pipeline.Definition{Name: "gauged", Input: []string{"source"}, Steps: []pipeline.Step{{Name: "read", Kind: pipeline.SourceRead, Recovery: "read again"}}},
		Steps:    map[string]runner.Step{"read": read}}
	stop := apptest.Host(ctx, t, cfg)
	var addr net.Addr
	select {
	case addr = <-served:
	case <-ctx.Done():
		t.Fatal("the metrics were never served")
	}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + addr.String() + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if err := app.Start(ctx, js, "gauged", "r-1", map[string]any{"source": "a.csv"}); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Wait(ctx, js, "gauged", "r-1"); err != nil {
		t.Fatal(err)
	}
	if code, body := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz while the services run: %d %q, want 200", code, body)
	}
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, `cairn_steps_verified_total{step="read"} 1`) {
		t.Errorf("/metrics after the run: %d, want read's commit counted:\n%s", code, body)
	}
	stop()
	for tick := time.NewTicker(20 * time.Millisecond); ; {
		if code, _ := get("/healthz"); code == 0 {
			break // no longer served
		}
		select {
		case <-ctx.Done():
			t.Fatal("the metrics are still served after the services stopped")
		case <-tick.C:
		}
	}
}
