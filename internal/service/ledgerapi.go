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
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairnhq/cairn/internal/books"
	"github.com/cairnhq/cairn/internal/ledgerapi"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/httpidem"
	"github.com/cairnhq/cairn/pkg/identity"
	"github.com/cairnhq/cairn/pkg/metrics"
)

// LedgerAPIConfig is the configuration of services/ledger-api, the ledger over HTTP
// (internal/ledgerapi). It is an outside system, the ledger, that Cairn's steps write to,
// not a step of a run: its one NATS connection reads the callers' keys (cairn-keys), as
// the NATS user ledger-api, which may read nothing else.
type LedgerAPIConfig struct {
	Addr        string        `envconfig:"LEDGER_API_ADDR"`
	KeyTTL      time.Duration `envconfig:"LEDGER_API_KEY_TTL" default:"24h"`
	DataDir     string        `envconfig:"DATA_DIR" default:"./.cairn"`
	LedgerDSN   Credentials   `envconfig:"LEDGER_DSN"`
	MetricsAddr string        `envconfig:"METRICS_ADDR"`
	StopGrace   time.Duration `envconfig:"STOP_GRACE" default:"10s"`
	// Where the callers' keys are read: NATS (required) as the user of NATSCreds (a
	// credentials file; empty for a server without users), replies under InboxPrefix.
	NATSURL     Credentials `envconfig:"NATS_URL"`
	NATSCreds   string      `envconfig:"NATS_CREDS"`
	InboxPrefix string      `envconfig:"INBOX_PREFIX" default:"_INBOX.cairn"`
	// Skew is how far a request's signing time may be from the server's clock.
	Skew time.Duration `envconfig:"LEDGER_API_SKEW" default:"5m"`
	// The bounds of one request: slow clients and big bodies hold no memory for long.
	ReadHeaderTimeout time.Duration `envconfig:"LEDGER_API_READ_HEADER_TIMEOUT" default:"5s"`
	ReadTimeout       time.Duration `envconfig:"LEDGER_API_READ_TIMEOUT" default:"30s"`
	WriteTimeout      time.Duration `envconfig:"LEDGER_API_WRITE_TIMEOUT" default:"60s"`
	IdleTimeout       time.Duration `envconfig:"LEDGER_API_IDLE_TIMEOUT" default:"120s"`
	MaxHeaderBytes    int           `envconfig:"LEDGER_API_MAX_HEADER_BYTES" default:"65536"`
	MaxBody           int64         `envconfig:"LEDGER_API_MAX_BODY" default:"1048576"`
}

// The range of CAIRN_LEDGER_API_KEY_TTL: a key must outlive a client's retries (a run
// resumed after a crash or a handover), and no window is longer than the longest setting.
const minKeyTTL = time.Minute

// The ranges of the ledger API's request bounds.
const (
	minHeaderBytes = 4 << 10
	maxHeaderBytes = 1 << 20
	minBody        = 1 << 10
	maxBody        = 64 << 20
	maxSkew        = time.Hour
)

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
	switch {
	case c.NATSURL == "":
		bad("CAIRN_NATS_URL is not set: the ledger API reads its callers' keys (cairn-keys) from NATS")
	default:
		if err := checkNATSURL(c.NATSURL); err != nil {
			errs = append(errs, err)
		}
	}
	if c.NATSCreds != "" {
		if _, err := os.Stat(c.NATSCreds); err != nil {
			bad("CAIRN_NATS_CREDS %s: %w", c.NATSCreds, err)
		}
	}
	if !validSubject(c.InboxPrefix) {
		bad("CAIRN_INBOX_PREFIX %q must be a subject without wildcards, like _INBOX.cairn", c.InboxPrefix)
	}
	if c.Skew <= 0 || c.Skew > maxSkew {
		bad("CAIRN_LEDGER_API_SKEW must be positive and at most %s, not %s", maxSkew, c.Skew)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"CAIRN_LEDGER_API_READ_HEADER_TIMEOUT", c.ReadHeaderTimeout}, {"CAIRN_LEDGER_API_READ_TIMEOUT", c.ReadTimeout},
		{"CAIRN_LEDGER_API_WRITE_TIMEOUT", c.WriteTimeout}, {"CAIRN_LEDGER_API_IDLE_TIMEOUT", c.IdleTimeout}} {
		if d.v <= 0 || d.v > maxSetting {
			bad("%s must be positive and at most %s, not %s", d.name, maxSetting, d.v)
		}
	}
	if c.MaxHeaderBytes < minHeaderBytes || c.MaxHeaderBytes > maxHeaderBytes {
		bad("CAIRN_LEDGER_API_MAX_HEADER_BYTES must be between %d and %d, not %d", minHeaderBytes, maxHeaderBytes, c.MaxHeaderBytes)
	}
	if c.MaxBody < minBody || c.MaxBody > maxBody {
		bad("CAIRN_LEDGER_API_MAX_BODY must be between %d and %d, not %d", minBody, maxBody, c.MaxBody)
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
	nc, js, err := connectLedgerAPI(c)
	if err != nil {
		log.Error("service stopped", slog.Any("error", err))
		os.Exit(1)
	}
	defer nc.Close()
	if err := RunLedgerAPI(ctx, c, js, log, ready); err != nil {
		log.Error("service stopped", slog.Any("error", err))
		if errors.Is(err, ErrSetting) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// connectLedgerAPI connects to CAIRN_NATS_URL as the ledger API's user, for the keys. A
// server not up yet is waited for: the API answers 503 until the keys are read.
func connectLedgerAPI(c LedgerAPIConfig) (*nats.Conn, jetstream.JetStream, error) {
	return dial(c.NATSURL, c.NATSCreds, "ledger-api", c.InboxPrefix+".ledger-api", nats.RetryOnFailedConnect(true))
}

// RunLedgerAPI opens the ledger's database, creates the middleware's tables where
// missing, and serves the API on c.Addr until ctx ends; it calls ready with the address it
// serves on once the database is open and the listener bound. Until the callers' keys
// (cairn-keys on js) are read every request is 503 and /readyz fails.
func RunLedgerAPI(ctx context.Context, c LedgerAPIConfig, js jetstream.JetStream, log *slog.Logger, ready func(net.Addr)) error {
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
		return fmt.Errorf("CAIRN_LEDGER_DSN: %w", scrubbed(err, c.LedgerDSN.passwords()...))
	}
	// Until the callers' keys can be read (NATS not up yet, or cairn init not run), every
	// request is 503 and the service unready; then the API serves.
	var api atomic.Pointer[http.Handler]
	keysErr := func() error {
		if api.Load() == nil {
			return errors.New("the callers' keys (cairn-keys) are not read yet: NATS down, or run cairn init")
		}
		return nil
	}
	keys := make(chan error, 1)
	go func() {
		keys <- openKeys(ctx, js, log, func(ring *identity.Ring) error {
			h, err := ledgerapi.Handler(ledgerapi.Config{DB: db, Expiry: c.KeyTTL, Logger: log.With(slog.String("service", "ledger-api")),
				Ring: ring, Skew: c.Skew, MaxBody: c.MaxBody})
			if err == nil {
				api.Store(&h)
			}
			return err
		})
	}()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := api.Load(); p != nil {
			(*p).ServeHTTP(w, r)
			return
		}
		w.Header().Set("Retry-After", "1")
		httpidem.Problem{Type: ledgerapi.TypeUnavailable, Title: "Ledger unavailable", Status: http.StatusServiceUnavailable,
			Detail: keysErr().Error() + "; retry later"}.Write(w)
	})
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
			return fmt.Errorf("the ledger's database: %w", scrubbed(err, c.LedgerDSN.passwords()...))
		}
		return keysErr()
	})
	if c.MetricsAddr != "" {
		addr, err := m.Listen(ctx, c.MetricsAddr, log)
		if err != nil {
			return fmt.Errorf("CAIRN_METRICS_ADDR: %w", err)
		}
		log.Info("serving metrics", slog.String("url", "http://"+addr.String()+"/metrics"), slog.String("readiness", "http://"+addr.String()+"/readyz"))
	}
	srv := &http.Server{Handler: counted(h, requests), ReadHeaderTimeout: c.ReadHeaderTimeout, ReadTimeout: c.ReadTimeout,
		WriteTimeout: c.WriteTimeout, IdleTimeout: c.IdleTimeout, MaxHeaderBytes: c.MaxHeaderBytes,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	if ready != nil {
		ready(l.Addr())
	}
	select {
	case err := <-served:
		return fmt.Errorf("serving the ledger API: %w", err)
	case err := <-keys:
		if err != nil {
			srv.Close()
			return err
		}
		select {
		case err := <-served:
			return fmt.Errorf("serving the ledger API: %w", err)
		case <-ctx.Done():
		}
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.StopGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("stopping the ledger API within CAIRN_STOP_GRACE (%s): %w", c.StopGrace, err)
	}
	return nil
}

// openKeys opens the ring of the callers' keys on js, trying again (every second up to
// every 10s) while NATS or the bucket is not there yet, and hands it to use; it returns
// use's error, or nil when ctx ends first.
func openKeys(ctx context.Context, js jetstream.JetStream, log *slog.Logger, use func(*identity.Ring) error) error {
	wait := time.Second
	for {
		ring, err := identity.OpenRing(ctx, js, assets.Default)
		if err == nil {
			log.Info("the callers' keys are open", slog.String("bucket", assets.Default.Bucket(identity.Bucket)))
			return use(ring)
		}
		log.Warn("waiting for the callers' keys (CAIRN_NATS_URL; run cairn init)", slog.Any("error", err))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, 10*time.Second)
	}
}

// counted counts h's answers by method and status.
func counted(h http.Handler, requests *prometheus.CounterVec) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		requests.WithLabelValues(methodLabel(r.Method), strconv.Itoa(sw.status)).Inc()
	})
}

// methodLabel bounds the method label to the methods HTTP names: a client's made-up
// method (of any length) counts as "other", so no client grows the series.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return m
	}
	return "other"
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
