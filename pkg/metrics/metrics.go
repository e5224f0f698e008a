package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics is every metric a Cairn process exports.
type Metrics struct {
	reg   *prometheus.Registry
	ready atomic.Pointer[func() error] // what /readyz asks; nil until the process says

	StepsStarted  *prometheus.CounterVec   // step: attempts that took their lease (or began, lease-free)
	StepsVerified *prometheus.CounterVec   // step: commits
	StepsFailed   *prometheus.CounterVec   // step, class: attempts that ended without a commit
	Retries       *prometheus.CounterVec   // step, kind: item (in-process retry) or attempt (message handed back)
	Restarts      *prometheus.CounterVec   // step: attempts that took over from a dead or expired owner
	Reassignments *prometheus.CounterVec   // step, reason: leases released for another worker
	Parked        *prometheus.CounterVec   // step: items parked by committed attempts
	Handovers     *prometheus.CounterVec   // step, reason: runs handed to a person
	Fenced        *prometheus.CounterVec   // step: attempts stopped by a fence or a lost lease
	Commands      *prometheus.CounterVec   // verb, outcome: run commands the supervisor handled
	Outbox        *prometheus.CounterVec   // outcome: outbox messages sent, dropped or rejected
	StepDuration  *prometheus.HistogramVec // step, outcome: seconds from taking the message to settling it
	RunRestarts   prometheus.Histogram     // restarts of a run, observed when its last step commits
}

// New makes a process's metrics on a registry of their own, with the Go and process collectors.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f := factory{reg}
	return &Metrics{
		reg:           reg,
		StepsStarted:  f.counter("cairn_steps_started_total", "Step attempts started.", "step"),
		StepsVerified: f.counter("cairn_steps_verified_total", "Step attempts verified and committed.", "step"),
		StepsFailed:   f.counter("cairn_steps_failed_total", "Step attempts that ended without a commit, by class (temporary, handover, stopped, fenced).", "step", "class"),
		Retries:       f.counter("cairn_retries_total", "Retries: kind item is a write or call retried in process, kind attempt a step attempt handed back for a later delivery.", "step", "kind"),
		Restarts:      f.counter("cairn_restarts_total", "Step attempts that restarted a step whose previous owner died or was taken over.", "step"),
		Reassignments: f.counter("cairn_reassignments_total", "Leases released so another worker takes the step, by reason (expired, owner_gone).", "step", "reason"),
		Parked:        f.counter("cairn_parked_items_total", "Items parked by committed step attempts.", "step"),
		Handovers:     f.counter("cairn_handovers_total", "Runs handed over to a person, by reason.", "step", "reason"),
		Fenced:        f.counter("cairn_fenced_total", "Attempts whose write or checkpoint was refused because a newer lease holder exists.", "step"),
		Commands:      f.counter("cairn_commands_total", "Run commands handled by the supervisor, by verb and outcome (applied, rejected, retried).", "verb", "outcome"),
		Outbox:        f.counter("cairn_outbox_messages_total", "Outbox messages by outcome (sent, dropped, rejected).", "outcome"),
		StepDuration: f.histogram("cairn_step_duration_seconds", "Seconds from a step message's arrival to its settlement, by outcome.",
			prometheus.ExponentialBuckets(0.005, 2.5, 12), "step", "outcome"),
		RunRestarts: promauto(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "cairn_run_restarts", Help: "Restarts per run, observed when the run's last step commits.",
			Buckets: []float64{0, 1, 2, 3, 5, 8, 13},
		})),
	}
}

// Registry is the registry the metrics are on, for tests and extra collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Func registers a gauge whose value f computes at scrape time (for example the outbox backlog).
// f must return quickly; it runs on every scrape.
func (m *Metrics) Func(name, help string, f func() float64) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
}

// Once registers a gauge (counter false) or a counter whose value f reads, unless one of that
// name is registered already (another pipeline's host in the process): the first stays.
func (m *Metrics) Once(name, help string, counter bool, f func() float64) {
	var c prometheus.Collector = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	if counter {
		c = prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
	}
	_ = m.reg.Register(c) // an AlreadyRegisteredError keeps the first
}

// CounterFunc registers a counter whose value f reads (for example a store's conflict count).
func (m *Metrics) CounterFunc(name, help string, f func() float64) {
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f))
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// SetReady sets what /readyz asks: ready answers nil when the process can do its work now,
// else an error saying why not. Until it is set, /readyz answers "starting".
func (m *Metrics) SetReady(ready func() error) { m.ready.Store(&ready) }

// Ready is what /readyz answers: nil when ready, else why not.
func (m *Metrics) Ready() error {
	f := m.ready.Load()
	if f == nil {
		return errStarting
	}
	return (*f)()
}

var errStarting = errors.New("starting")

// serveReady answers /readyz: 200 "ready", or 503 with the reason.
func (m *Metrics) serveReady(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err := m.Ready(); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready: %v\n", err)
		return
	}
	fmt.Fprintln(w, "ready")
}

// Listen binds addr now, so a wrong address stops the service at start, and serves until ctx
// ends: /metrics; /healthz, 200 while the process serves at all (liveness); and /readyz, 200
// while SetReady's function says ready and 503 with the reason otherwise (readiness).
func (m *Metrics) Listen(ctx context.Context, addr string, log *slog.Logger) (net.Addr, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("serving metrics on %q: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", m.serveReady)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", slog.Any("error", err))
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return l.Addr(), nil
}

type factory struct{ reg *prometheus.Registry }

func (f factory) counter(name, help string, labels ...string) *prometheus.CounterVec {
	return promauto(f.reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels))
}

func (f factory) histogram(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return promauto(f.reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels))
}

func promauto[C prometheus.Collector](reg *prometheus.Registry, c C) C {
	reg.MustRegister(c)
	return c
}
