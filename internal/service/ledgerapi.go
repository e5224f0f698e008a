package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairnhq/cairn/internal/books"
	"github.com/cairnhq/cairn/internal/ledgerapi"
	"github.com/cairnhq/cairn/pkg/metrics"
)

// LedgerAPIConfig is the configuration of services/ledger-api, the ledger over HTTP
// (internal/ledgerapi). The service opens no NATS connection: it is an outside system,
// the ledger, that Cairn's steps write to, not a step of a run.
type LedgerAPIConfig struct {
	Addr        string        `envconfig:"LEDGER_API_ADDR"`
	KeyTTL      time.Duration `envconfig:"LEDGER_API_KEY_TTL" default:"24h"`
	DataDir     string        `envconfig:"DATA_DIR" default:"./.cairn"`
	LedgerDSN   Credentials   `envconfig:"LEDGER_DSN"`
	MetricsAddr string        `envconfig:"METRICS_ADDR"`
	StopGrace   time.Duration `envconfig:"STOP_GRACE" default:"10s"`
}

// The range of CAIRN_LEDGER_API_KEY_TTL: a key must outlive a client's retries (a run
// resumed after a crash or a handover), and no window is longer than the longest setting.
const minKeyTTL = time.Minute

// LoadLedgerAPI reads the ledger service's environment, fills the derived defaults and
// validates; every error is ErrSetting.
func LoadLedgerAPI() (LedgerAPIConfig, error) {
	var c LedgerAPIConfig
	if err := envconfig.Process("cairn", &c); err != nil {
		return c, settingError{fmt.Errorf("configuration: %w", err)}
	}
	if c.LedgerDSN == "" {
		c.LedgerDSN = Credentials("sqlite:" + filepath.Join(c.DataDir, "ledger.db"))
	}
	return c, c.Validate()
}

// Validate returns one sentence per broken rule, naming the variable.
func (c LedgerAPIConfig) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if err := checkHostPort(c.Addr); err != nil {
		bad("CAIRN_LEDGER_API_ADDR %q must be HOST:PORT (HOST may be empty for every interface): %w", c.Addr, err)
	}
	if err := books.CheckDSN(string(c.LedgerDSN)); err != nil {
		bad("CAIRN_LEDGER_DSN: %w", err)
	}
	if c.KeyTTL < minKeyTTL || c.KeyTTL > maxSetting {
		bad("CAIRN_LEDGER_API_KEY_TTL must be between %s and %s, not %s", minKeyTTL, maxSetting, c.KeyTTL)
	}
	if c.StopGrace <= 0 || c.StopGrace > maxSetting {
		bad("CAIRN_STOP_GRACE must be positive and at most %s, not %s", maxSetting, c.StopGrace)
	}
	if c.MetricsAddr != "" {
		if err := checkHostPort(c.MetricsAddr); err != nil {
			bad("CAIRN_METRICS_ADDR %q must be HOST:PORT: %w", c.MetricsAddr, err)
		}
	}
	if len(errs) > 0 {
		return settingError{errors.Join(errs...)}
	}
	return nil
}

func checkHostPort(addr string) error {
	if addr == "" {
		return errors.New("it is not set")
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	return nil
}

// LedgerAPIMain is the whole of services/ledger-api's main: it exits 0 on a clean stop
// (SIGINT, SIGTERM), 2 on a wrong setting, 1 on any other failure.
func LedgerAPIMain() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	c, err := LoadLedgerAPI()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ready := func(addr net.Addr) {
		log.Info("serving the ledger", slog.String("url", "http://"+addr.String()+"/v1/entries"), slog.Any("dsn", c.LedgerDSN))
		fmt.Println("ready")
	}
	if err := RunLedgerAPI(ctx, c, log, ready); err != nil {
		log.Error("service stopped", slog.Any("error", err))
		if errors.Is(err, ErrSetting) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// RunLedgerAPI opens the ledger's database, creates the middleware's tables where
// missing, and serves the API on c.Addr until ctx ends; it calls ready with the address
// it serves on once the database is open and the listener bound.
func RunLedgerAPI(ctx context.Context, c LedgerAPIConfig, log *slog.Logger, ready func(net.Addr)) error {
	l, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return settingError{fmt.Errorf("CAIRN_LEDGER_API_ADDR %s: %w", c.Addr, err)}
	}
	defer l.Close()
	if books.CheckDSN(string(c.LedgerDSN)) == nil && c.LedgerDSN == Credentials("sqlite:"+filepath.Join(c.DataDir, "ledger.db")) {
		if err := os.MkdirAll(c.DataDir, 0o755); err != nil {
			return fmt.Errorf("CAIRN_DATA_DIR %s: %w", c.DataDir, err)
		}
	}
	db, err := openBooks(ctx, "CAIRN_LEDGER_DSN", c.LedgerDSN)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := ledgerapi.CreateTables(ctx, db); err != nil {
		return fmt.Errorf("CAIRN_LEDGER_DSN: %w", scrubbed(err, c.LedgerDSN.password()))
	}
	h, err := ledgerapi.Handler(ledgerapi.Config{DB: db, Expiry: c.KeyTTL, Logger: log.With(slog.String("service", "ledger-api"))})
	if err != nil {
		return err
	}
	m := metrics.New()
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_ledger_api_requests_total",
		Help: "Requests the ledger API answered, by method and status code (replays included)."}, []string{"method", "code"})
	m.Registry().MustRegister(requests)
	m.SetReady(func() error {
		if ctx.Err() != nil {
			return errors.New("stopping")
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if err := db.SQL().PingContext(pctx); err != nil {
			return fmt.Errorf("the ledger's database: %w", scrubbed(err, c.LedgerDSN.password()))
		}
		return nil
	})
	if c.MetricsAddr != "" {
		addr, err := m.Listen(ctx, c.MetricsAddr, log)
		if err != nil {
			return fmt.Errorf("CAIRN_METRICS_ADDR: %w", err)
		}
		log.Info("serving metrics", slog.String("url", "http://"+addr.String()+"/metrics"), slog.String("readiness", "http://"+addr.String()+"/readyz"))
	}
	srv := &http.Server{Handler: counted(h, requests), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	if ready != nil {
		ready(l.Addr())
	}
	select {
	case err := <-served:
		return fmt.Errorf("serving the ledger API: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.StopGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("stopping the ledger API within CAIRN_STOP_GRACE (%s): %w", c.StopGrace, err)
	}
	return nil
}

// counted counts h's answers by method and status.
func counted(h http.Handler, requests *prometheus.CounterVec) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		requests.WithLabelValues(r.Method, strconv.Itoa(sw.status)).Inc()
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(status int) {
	if !w.wrote {
		w.status, w.wrote = status, true
	}
	w.ResponseWriter.WriteHeader(status)
}
