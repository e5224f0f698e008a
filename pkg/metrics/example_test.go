package metrics_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/cairnhq/cairn/pkg/metrics"
)

// A service counts its work, says when it is ready, and serves /metrics, /healthz and
// /readyz on its own port for Prometheus and the orchestrator.
func ExampleMetrics_Listen() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := metrics.New()
	addr, err := m.Listen(ctx, "127.0.0.1:0", slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Println(err)
		return
	}
	get := func(path string) {
		resp, err := http.Get("http://" + addr.String() + path)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if line := sc.Text(); path != "/metrics" || strings.HasPrefix(line, "cairn_steps_") || strings.HasPrefix(line, "cairn_outbox_") {
				fmt.Println(path, resp.StatusCode, line)
			}
		}
	}

	get("/healthz")
	get("/readyz")
	m.SetReady(func() error { return errors.New("no NATS connection yet") })
	get("/readyz")
	m.SetReady(func() error { return nil })
	get("/readyz")

	m.StepsStarted.WithLabelValues("extract").Add(2)
	m.StepsVerified.WithLabelValues("extract").Inc()
	m.Func("cairn_outbox_backlog", "Outbox messages waiting to be sent.", func() float64 { return 3 })
	get("/metrics")
	// Output:
	// /healthz 200 ok
	// /readyz 503 not ready: starting
	// /readyz 503 not ready: no NATS connection yet
	// /readyz 200 ready
	// /metrics 200 cairn_outbox_backlog 3
	// /metrics 200 cairn_steps_started_total{step="extract"} 2
	// /metrics 200 cairn_steps_verified_total{step="extract"} 1
}
