package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/books"
	"github.com/cairnhq/cairn/internal/ledgerapi"
	"github.com/cairnhq/cairn/internal/night"
	"github.com/cairnhq/cairn/internal/recon"
	nightundo "github.com/cairnhq/cairn/internal/undo"
	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/faults"
	"github.com/cairnhq/cairn/pkg/identity"
	"github.com/cairnhq/cairn/pkg/metrics"
	"github.com/cairnhq/cairn/pkg/outbox"
	"github.com/cairnhq/cairn/pkg/ratelimit"
	"github.com/cairnhq/cairn/pkg/undo"
)

// Assets is the asset configuration for c.
func (c Config) Assets() assets.Config {
	return assets.Config{Replicas: c.Replicas, Steps: night.Pipeline.Names(), AckWait: c.AckWait, MaxDeliver: c.MaxDeliver, Limits: c.Limits()}
}

// connectTimeout bounds the dial and TLS handshake of each connection attempt.
const connectTimeout = 10 * time.Second

// Connect connects to NATS as name.
func Connect(c Config, name string) (*nats.Conn, jetstream.JetStream, error) {
	return dial(c.NATSURL, c.NATSCreds, name, c.Inbox(name))
}

// dial connects to url as service name (the user of creds, when given), its replies under
// inbox, reconnecting for ever.
func dial(url Credentials, creds, name, inbox string, extra ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	// A TLS handshake on a busy machine (a whole deployment starting at once) can take longer
	// than nats.go's 2 s default, which would end the service before it is ready.
	opts := append([]nats.Option{nats.Name("cairn-" + name), nats.MaxReconnects(-1), nats.CustomInboxPrefix(inbox), nats.Timeout(connectTimeout)}, extra...)
	if creds != "" {
		opts = append(opts, nats.UserCredentials(creds))
	}
	nc, err := nats.Connect(string(url), opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to CAIRN_NATS_URL %s: %w", url, scrubbed(err, url.passwords()...))
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("JetStream on %s: %w", url, scrubbed(err, url.passwords()...))
	}
	return nc, js, nil
}

// Deps are what the night's process shares besides the framework's host (app.Host, made by
// RunAll): its settings, its connection, the buckets its steps read (night.Env), its faults,
// its metrics and readiness.
type Deps struct {
	Config  Config
	JS      jetstream.JetStream
	Marks   jetstream.KeyValue
	Memo    jetstream.KeyValue
	Faults  *faults.Set
	Logger  *slog.Logger
	Now     func() time.Time
	Metrics *metrics.Metrics
	// MetricsAddr is where /metrics, /healthz and /readyz are served; nil without
	// CAIRN_METRICS_ADDR.
	MetricsAddr net.Addr
	// Ready, when set, is called by RunAll once the databases are open and pinged, before
	// the services start: the process is ready then ("ready" on standard output).
	Ready func()

	running atomic.Bool                 // RunAll has opened the databases and started the services
	signers map[string]*identity.Signer // each service's, set by RunAll (keys.go)

	failOnce sync.Once
	failed   chan struct{} // closed by fail
	failErr  error         // the first service that stopped by itself, set before failed closes
}

// fail marks the process unready for good with err (a service that stopped by itself);
// the first failure wins.
func (d *Deps) fail(err error) {
	d.failOnce.Do(func() {
		d.failErr = err
		close(d.failed)
	})
}

// failure is the error fail recorded, nil before.
func (d *Deps) failure() error {
	select {
	case <-d.failed:
		return d.failErr
	default:
		return nil
	}
}

// Open checks the assets, looks them up, and serves /metrics on CAIRN_METRICS_ADDR until ctx
// ends.
func Open(ctx context.Context, c Config, js jetstream.JetStream, log *slog.Logger) (*Deps, error) {
	if err := assets.Check(ctx, js, c.Assets()); err != nil {
		return nil, fmt.Errorf("checking the NATS assets (run cairn init): %w", err)
	}
	d := &Deps{Config: c, JS: js, Logger: log, Now: time.Now, Metrics: metrics.New(), failed: make(chan struct{})}
	d.Metrics.SetReady(func() error { return d.ready(ctx) })
	var err error
	// The keys are checked here, where the hint is the night's (the host reads them again).
	if _, err = identity.OpenRing(ctx, js, assets.Default); err != nil {
		return nil, fmt.Errorf("the signing keys (run cairn init): %w", err)
	}
	// What the night's steps use besides the host's handles (night.Env).
	for name, kv := range map[string]*jetstream.KeyValue{assets.BucketOutbox: &d.Marks, assets.BucketMemo: &d.Memo} {
		if *kv, err = js.KeyValue(ctx, name); err != nil {
			return nil, fmt.Errorf("looking up bucket %s: %w", name, err)
		}
	}
	if d.Faults, err = faults.Parse(c.Faults, filepath.Join(c.DataDir, "faults")); err != nil {
		return nil, err
	}
	if c.MetricsAddr != "" {
		if d.MetricsAddr, err = d.Metrics.Listen(ctx, c.MetricsAddr, log); err != nil {
			return nil, fmt.Errorf("CAIRN_METRICS_ADDR: %w", err)
		}
		d.LogServing(log)
	}
	return d, nil
}

// LogServing logs where the process serves /metrics and /readyz, if it does: with
// CAIRN_METRICS_ADDR's port 0 this line is the only way to know.
func (d *Deps) LogServing(log *slog.Logger) {
	if d.MetricsAddr == nil {
		return
	}
	log.Info("serving metrics", slog.String("url", "http://"+d.MetricsAddr.String()+"/metrics"),
		slog.String("readiness", "http://"+d.MetricsAddr.String()+"/readyz"))
}

// ready says whether the process can do its work now: none of its services stopped by
// itself (a loop that ended keeps the process unready until it exits), its services are
// running, it is not stopping, and its NATS connection is up (a service whose server is
// gone, or which is reconnecting, is not ready). /readyz answers it.
func (d *Deps) ready(ctx context.Context) error {
	switch {
	case d.failure() != nil:
		return d.failure()
	case ctx.Err() != nil:
		return errors.New("stopping")
	case d.JS.Conn().Status() != nats.CONNECTED:
		return fmt.Errorf("the NATS connection is %s", strings.ToLower(d.JS.Conn().Status().String()))
	case !d.running.Load():
		return errors.New("starting: opening the databases")
	}
	return nil
}

// Which services use which database: a service opens only those (its database role
// needs no other), and the others stay nil in its night.Env.
var (
	ledgerUsers = []string{night.PostLedger, "compensator"}
	erpUsers    = []string{night.Match, night.Compare, night.UpdateStock, "compensator"}
)

// NightEnv opens the databases the named services use (all of them without names).
func (d *Deps) NightEnv(ctx context.Context, names ...string) (*night.Env, func(), error) {
	uses := func(users []string) bool {
		return len(names) == 0 || slices.ContainsFunc(names, func(n string) bool { return slices.Contains(users, n) })
	}
	if err := os.MkdirAll(d.Config.DataDir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("CAIRN_DATA_DIR %s: %w", d.Config.DataDir, err)
	}
	var ledger, erp *books.DB
	var err error
	var api map[string]*ledgerapi.Client
	switch {
	case uses(ledgerUsers) && d.Config.LedgerURL != "":
		if api, err = d.ledgerClients(ctx, names...); err != nil {
			return nil, nil, err
		}
	case uses(ledgerUsers):
		if ledger, err = openBooks(ctx, "CAIRN_LEDGER_DSN", d.Config.LedgerDSN); err != nil {
			return nil, nil, err
		}
	}
	if uses(erpUsers) {
		if erp, err = openBooks(ctx, "CAIRN_ERP_DSN", d.Config.ERPDSN); err != nil {
			ledger.Close()
			return nil, nil, err
		}
		// The ERP's own tables (purchase orders, receipts) exist even before the first
		// gen, on SQLite as on PostgreSQL.
		if err := recon.CreateERPTables(ctx, erp); err != nil {
			ledger.Close()
			erp.Close()
			return nil, nil, fmt.Errorf("CAIRN_ERP_DSN: %w", scrubbed(err, d.Config.ERPDSN.passwords()...))
		}
	}
	var extractor recon.Extractor = recon.RuleExtractor{}
	if c := d.Config; c.ModelURL != "" {
		lim, err := ratelimit.New(ctx, ratelimit.Config{JS: d.JS, Limit: c.ModelLimit()})
		if err != nil {
			ledger.Close()
			erp.Close()
			return nil, nil, fmt.Errorf("CAIRN_MODEL_RPS: %w", err)
		}
		limitMetrics(d.Metrics, lim, ModelLimitKey, "CAIRN_MODEL_RPS")
		extractor = recon.NewModelExtractor(c.ModelURL, c.ModelName, string(c.ModelKey), lim, c.ModelTimeout)
	}
	env := &night.Env{
		InboxDir: d.Config.InboxDir, Ledger: ledger, LedgerAPI: api, ERP: erp, Memo: d.Memo, Marks: d.Marks, Extractor: extractor,
		MailFrom: mailFrom, FinanceTo: financeTo,
		MaxDocumentBytes: d.Config.MaxDocumentBytes,
	}
	return env, func() { ledger.Close(); erp.Close() }, nil
}

// ledgerClients is the ledger over HTTP (CAIRN_LEDGER_URL), under its shared limit: a
// client for each of the named services that writes the ledger (all of them without
// names), signing as that service with its own key.
func (d *Deps) ledgerClients(ctx context.Context, names ...string) (map[string]*ledgerapi.Client, error) {
	c := d.Config
	lim, err := ratelimit.New(ctx, ratelimit.Config{JS: d.JS, Limit: c.LedgerLimit()})
	if err != nil {
		return nil, fmt.Errorf("CAIRN_LEDGER_RPS: %w", err)
	}
	limitMetrics(d.Metrics, lim, LedgerLimitKey, "CAIRN_LEDGER_RPS")
	out := map[string]*ledgerapi.Client{}
	for _, name := range ledgerUsers {
		if len(names) > 0 && !slices.Contains(names, name) {
			continue
		}
		sg := d.signers[name]
		if sg == nil {
			return nil, fmt.Errorf("CAIRN_LEDGER_URL: no signing key of service %s to sign its requests with", name)
		}
		api, err := ledgerapi.NewClient(ledgerapi.ClientConfig{URL: c.LedgerURL, CallTimeout: c.LedgerTimeout, Limiter: lim, Outage: c.LedgerOutage, Signer: sg, Now: d.Now})
		if err != nil {
			return nil, settingError{fmt.Errorf("CAIRN_LEDGER_URL: %w", err)}
		}
		out[name] = api
	}
	return out, nil
}

// openBooks opens the database dsn names, its errors naming the variable and never its
// password; a DSN the database refuses (its user, password or database) is ErrSetting.
func openBooks(ctx context.Context, variable string, dsn Credentials) (*books.DB, error) {
	db, err := books.Open(ctx, string(dsn))
	if err == nil {
		return db, nil
	}
	err = fmt.Errorf("%s: %w", variable, scrubbed(err, dsn.passwords()...))
	if errors.Is(err, books.ErrRefused) || errors.Is(err, books.ErrUnsupportedDSN) {
		return nil, settingError{err}
	}
	return nil, err
}

// appConfig is the night as a pipeline on the framework's host (app.Config): its definition
// in the default space, its steps over env, its settings, the signers of the process's
// services, its compensator's systems (the books and the mail) and its outbox.
func (d *Deps) appConfig(env *night.Env) (app.Config, error) {
	c := d.Config
	out, err := d.outboxConfig()
	if err != nil {
		return app.Config{}, err
	}
	return app.Config{
		JS: d.JS, Pipeline: night.Pipeline, Steps: env.Steps(), DefaultSpace: true, KeysDir: c.SigningSeedDir, Signers: d.signers,
		Replicas: c.Replicas, AckWait: c.AckWait, Lease: c.Lease, Heartbeat: c.Heartbeat, TakeoverGap: c.TakeoverGap,
		StallTimeout: c.StallTimeout, RetryAttempts: c.RetryAttempts, LoopGuard: c.LoopGuard, Concurrency: c.StepConcurrency,
		StopGrace: c.StopGrace, MaxDeliver: c.MaxDeliver, ParkLimit: c.RunnerParkLimit(), ReassignLimit: c.ReassignLimit,
		CodeVersion: CodeVersion(), OutboxStall: c.OutboxStall, ApprovalSteps: c.ApprovalSteps, ApprovalTimeout: c.ApprovalTimeout,
		Notices: c.notices(), Outbox: out,
		SystemsOf: func(h app.Handles) (map[string]undo.System, error) {
			ledger := func(shadow bool) books.Book { return env.LedgerBook("compensator", shadow) }
			return nightundo.Night{JS: h.JS, Ledger: ledger, ERP: env.ERP, Marks: h.Marks, Store: h.Store, Now: h.Now}.Systems()
		},
		// Unready at once: the step in hand still has its grace before its loop returns.
		Ended:  func(service string, err error) { d.fail(fmt.Errorf("service %s stopped: %w", service, err)) },
		Faults: d.Faults, Now: d.Now, Logger: d.Logger, Metrics: d.Metrics,
	}, nil
}

// outboxConfig is the night's outbox: its mail to CAIRN_SMTP_ADDR, else as files in
// CAIRN_MAIL_DIR; from mailFrom to the recipients its steps derive; the kinds each step
// queues. The host adds the notices (CAIRN_NOTIFY_*), the sender's turn, the marks, the
// timeline and the metrics.
func (d *Deps) outboxConfig() (*outbox.SenderConfig, error) {
	c := d.Config
	// The sender's turn is two thirds of the ack wait (the host's): the call itself gets half
	// of it, the marks the rest.
	turn := c.AckWait * 2 / 3
	var t outbox.Transport = outbox.FileTransport{Dir: c.MailDir}
	if c.SMTPAddr != "" {
		t = outbox.SMTPTransport{Addr: c.SMTPAddr, Timeout: turn / 2}
	} else if err := os.MkdirAll(c.MailDir, 0o755); err != nil {
		return nil, fmt.Errorf("CAIRN_MAIL_DIR %s: %w", c.MailDir, err)
	}
	// From mailFrom, to the recipients the night's steps derive; the host allows the notices.
	return &outbox.SenderConfig{Transport: t, MaxBackoff: c.OutboxBackoff, Allow: outbox.Allow{From: mailFrom, Mail: night.Recipients(financeTo)},
		Trust: &outbox.Trust{Kinds: night.Kinds()}}, nil
}

// The one sender of Cairn's mail, and the finance mailbox the night's report goes to.
const (
	mailFrom  = app.DefaultFrom
	financeTo = "finance-head@cairn.local"
)

// notices are where the night's handover and approval notices go (app.Notices, the one
// home of their messages): CAIRN_NOTIFY_EMAIL and CAIRN_NOTIFY_WEBHOOK, sent as mailFrom.
func (c Config) notices() app.Notices {
	return app.Notices{Email: c.NotifyEmail, Webhook: c.NotifyWebhook, Secret: []byte(c.NotifySecret), From: mailFrom}
}
