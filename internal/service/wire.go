package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
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
	"github.com/cairnhq/cairn/pkg/artifacts"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/audit"
	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/faults"
	"github.com/cairnhq/cairn/pkg/identity"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/metrics"
	"github.com/cairnhq/cairn/pkg/outbox"
	"github.com/cairnhq/cairn/pkg/ratelimit"
	"github.com/cairnhq/cairn/pkg/runner"
	"github.com/cairnhq/cairn/pkg/supervisor"
	"github.com/cairnhq/cairn/pkg/undo"
)

// Assets is the asset configuration for c.
func (c Config) Assets() assets.Config {
	return assets.Config{Replicas: c.Replicas, Steps: night.Pipeline.Names(), AckWait: c.AckWait, MaxDeliver: c.MaxDeliver}
}

// connectTimeout bounds the dial and TLS handshake of each connection attempt.
const connectTimeout = 10 * time.Second

// Connect connects to NATS as name.
func Connect(c Config, name string) (*nats.Conn, jetstream.JetStream, error) {
	// A TLS handshake on a busy machine (a whole deployment starting at once) can take longer
	// than nats.go's 2 s default, which would end the service before it is ready.
	opts := []nats.Option{nats.Name("cairn-" + name), nats.MaxReconnects(-1), nats.CustomInboxPrefix(c.Inbox(name)), nats.Timeout(connectTimeout)}
	if c.NATSCreds != "" {
		opts = append(opts, nats.UserCredentials(c.NATSCreds))
	}
	nc, err := nats.Connect(string(c.NATSURL), opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to CAIRN_NATS_URL %s: %w", c.NATSURL, scrubbed(err, c.NATSURL.password()))
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("JetStream on %s: %w", c.NATSURL, scrubbed(err, c.NATSURL.password()))
	}
	return nc, js, nil
}

// Deps are the handles every service shares.
type Deps struct {
	Config    Config
	JS        jetstream.JetStream
	Store     *kc.Store
	Artifacts *artifacts.Store
	Handovers jetstream.KeyValue
	Marks     jetstream.KeyValue
	Memo      jetstream.KeyValue
	Natural   jetstream.KeyValue // cairn-natural-keys
	Faults    *faults.Set
	Ring      *identity.Ring // the registered keys every read is checked against
	Logger    *slog.Logger
	Now       func() time.Time
	Metrics   *metrics.Metrics
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
	if d.Ring, err = identity.OpenRing(ctx, js); err != nil {
		return nil, fmt.Errorf("the signing keys (run cairn init): %w", err)
	}
	if d.Store, err = kc.Open(ctx, js, assets.BucketRuns, kc.WithClock(func() time.Time { return d.Now() }), kc.WithRing(d.Ring), kc.WithPipeline(night.Pipeline.Names())); err != nil {
		return nil, err
	}
	d.Metrics.CounterFunc("cairn_cas_conflicts_total", "Checkpoint compare-and-set writes refused because another writer changed the record first.",
		func() float64 { return float64(d.Store.Conflicts()) })
	if d.Artifacts, err = artifacts.Open(ctx, js, assets.ObjectArtifacts); err != nil {
		return nil, err
	}
	d.Store = d.Store.Moving(d.Artifacts.SaveObject) // every writer: the budget's room lent (kvcheckpoint)
	for name, kv := range map[string]*jetstream.KeyValue{assets.BucketHandovers: &d.Handovers, assets.BucketOutbox: &d.Marks, assets.BucketMemo: &d.Memo, assets.BucketNaturalKeys: &d.Natural} {
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
	var api *ledgerapi.Client
	switch {
	case uses(ledgerUsers) && d.Config.LedgerURL != "":
		if api, err = d.ledgerClient(ctx); err != nil {
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
			return nil, nil, fmt.Errorf("CAIRN_ERP_DSN: %w", scrubbed(err, d.Config.ERPDSN.password()))
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

// ledgerClient is the ledger over HTTP (CAIRN_LEDGER_URL), under its shared limit.
func (d *Deps) ledgerClient(ctx context.Context) (*ledgerapi.Client, error) {
	c := d.Config
	lim, err := ratelimit.New(ctx, ratelimit.Config{JS: d.JS, Limit: c.LedgerLimit()})
	if err != nil {
		return nil, fmt.Errorf("CAIRN_LEDGER_RPS: %w", err)
	}
	limitMetrics(d.Metrics, lim, LedgerLimitKey, "CAIRN_LEDGER_RPS")
	api, err := ledgerapi.NewClient(ledgerapi.ClientConfig{URL: c.LedgerURL, CallTimeout: c.LedgerTimeout, Limiter: lim, Outage: c.LedgerOutage})
	if err != nil {
		return nil, settingError{fmt.Errorf("CAIRN_LEDGER_URL: %w", err)}
	}
	return api, nil
}

// openBooks opens the database dsn names, its errors naming the variable and never its
// password; a DSN the database refuses (its user, password or database) is ErrSetting.
func openBooks(ctx context.Context, variable string, dsn Credentials) (*books.DB, error) {
	db, err := books.Open(ctx, string(dsn))
	if err == nil {
		return db, nil
	}
	err = fmt.Errorf("%s: %w", variable, scrubbed(err, dsn.password()))
	if errors.Is(err, books.ErrRefused) || errors.Is(err, books.ErrUnsupportedDSN) {
		return nil, settingError{err}
	}
	return nil, err
}

// RunStep runs one step service until ctx ends.
func (d *Deps) RunStep(ctx context.Context, env *night.Env, step string) error {
	impl, ok := env.Steps()[step]
	if !ok {
		return fmt.Errorf("no step %q in the pipeline", step)
	}
	store := d.storeOf(step)
	r, err := runner.New(runner.Config{
		JS: d.JS, Store: store, Artifacts: d.Artifacts, Handovers: d.Handovers, Memo: d.Memo, Pipeline: night.Pipeline,
		StepName: step, Step: impl, Heartbeat: d.Config.Heartbeat, Lease: d.Config.Lease, TakeoverGap: d.Config.TakeoverGap,
		RetryAttempts: d.Config.RetryAttempts, LoopGuard: d.Config.LoopGuard, ParkLimit: d.Config.RunnerParkLimit(),
		MaxDeliver: d.Config.MaxDeliver, Faults: d.Faults, Now: d.Now, Logger: d.Logger.With(slog.String("service", step)),
		Finishing: d.settleAs(store), StopGrace: d.Config.StopGrace, Metrics: d.Metrics, Concurrency: d.Config.StepConcurrency,
		Approval: slices.Contains(d.Config.ApprovalSteps, step), Notify: d.notifyAs(step), CodeVersion: CodeVersion(),
		// Unready at once: the step in hand still has its grace before Run returns.
		Ended: func(err error) { d.fail(fmt.Errorf("service %s stopped: %w", step, err)) },
	})
	if err != nil {
		if slices.Contains(d.Config.ApprovalSteps, step) {
			return fmt.Errorf("CAIRN_APPROVAL_STEPS: %w", err)
		}
		return err
	}
	return r.Run(ctx)
}

// settleAs settles a finishing run by store's signer.
func (d *Deps) settleAs(store *kc.Store) func(ctx context.Context, runID string) {
	return func(ctx context.Context, runID string) {
		if _, err := supervisor.Settle(ctx, d.JS, assets.Default, store, d.Marks, runID, d.Now); err != nil {
			d.Logger.Warn("settling run", slog.String("run_id", runID), slog.Any("error", err))
		}
	}
}

// storeOf is the checkpoint store that signs as service name (keys.go).
func (d *Deps) storeOf(name string) *kc.Store { return d.Store.As(d.signers[name]) }

// RunCompensator runs the compensator (undo) until ctx ends.
func (d *Deps) RunCompensator(ctx context.Context, env *night.Env) error {
	store := d.storeOf("compensator")
	systems, err := nightundo.Night{JS: d.JS, Ledger: env.LedgerBook, ERP: env.ERP, Marks: d.Marks, Store: store, Now: d.Now}.Systems()
	if err != nil {
		return err
	}
	c, err := undo.New(undo.Config{
		JS: d.JS, Store: store, Systems: systems, Handovers: d.Handovers, Heartbeat: d.Config.Heartbeat,
		TakeoverGap: d.Config.TakeoverGap, Faults: d.Faults, Now: d.Now, Logger: d.Logger, RetryAttempts: d.Config.RetryAttempts,
	})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// RunSupervisor runs the supervisor until ctx ends.
func (d *Deps) RunSupervisor(ctx context.Context) error {
	s, err := supervisor.New(supervisor.Config{
		JS: d.JS, Store: d.storeOf("supervisor"), Approvers: d.Ring, Marks: d.Marks, Handovers: d.Handovers, NaturalKeys: d.Natural, Pipeline: night.Pipeline, Lease: d.Config.Lease,
		TakeoverGap: d.Config.TakeoverGap, Heartbeat: d.Config.Heartbeat, StallTimeout: d.Config.StallTimeout, ApprovalTimeout: d.Config.ApprovalTimeout, ReassignLimit: d.Config.ReassignLimit,
		OutboxStall: d.Config.OutboxStall,
		Now:         d.Now, Logger: d.Logger.With(slog.String("service", "supervisor")), Metrics: d.Metrics, Notify: d.notifyAs("supervisor"), Faults: d.Faults,
	})
	if err != nil {
		return err
	}
	return s.Run(ctx)
}

// RunOutboxSender runs the outbox sender until ctx ends.
func (d *Deps) RunOutboxSender(ctx context.Context) error {
	// One message's turn ends well inside the durable's ack wait, so a delivery that hangs is
	// given up and retried by this sender, never handed to a second one while it still runs;
	// the call itself gets half of the turn, the marks the rest.
	turn := d.Config.AckWait * 2 / 3
	var t outbox.Transport = outbox.FileTransport{Dir: d.Config.MailDir}
	if d.Config.SMTPAddr != "" {
		t = outbox.SMTPTransport{Addr: d.Config.SMTPAddr, Timeout: turn / 2}
	} else if err := os.MkdirAll(d.Config.MailDir, 0o755); err != nil {
		return fmt.Errorf("CAIRN_MAIL_DIR %s: %w", d.Config.MailDir, err)
	}
	if d.Config.NotifyWebhook != "" {
		t = outbox.Routed{Mail: t, Webhook: outbox.WebhookTransport{URL: d.Config.NotifyWebhook, Secret: []byte(d.Config.NotifySecret),
			Client: &http.Client{Timeout: turn / 2}, Now: d.Now}}
	}
	log := d.Logger.With(slog.String("service", "outbox-sender"))
	rej := audit.New(d.JS, "outbox-sender", d.Now)
	d.Metrics.Func("cairn_outbox_backlog", "Outbox messages not yet sent (pending and unacknowledged on the outbox-sender consumer).", d.outboxBacklog(ctx))
	s, err := outbox.NewSender(outbox.SenderConfig{
		JS: d.JS, Transport: countingTransport{t, d.Metrics}, Logger: log, Timeout: turn, MaxBackoff: d.Config.OutboxBackoff,
		Admit: outbox.RecordAdmission(d.Store), Faults: d.Faults, Trust: d.outboxTrust(),
		Allow:  d.Config.allow(),
		Marked: d.settleAs(d.storeOf("outbox-sender")),
		Dropped: func(ctx context.Context, m outbox.Message, reason string) {
			d.Metrics.Outbox.WithLabelValues("dropped").Inc()
			log.Warn("outbox message dropped", slog.String("run_id", m.RunID), slog.String("key", m.Key), slog.String("reason", reason))
			_ = rej.Record(ctx, events.AuditItemID(m.RunID, m.Step, "outbox.dropped", m.Token, m.Key, 0),
				events.Audit{RunID: m.RunID, Step: m.Step, Event: "outbox.dropped", Token: m.Token, Item: m.Key, Detail: reason})
		},
		// The supervisor hands the run over naming the message and this error.
		Refused: func(ctx context.Context, m outbox.Message, err error) {
			d.Metrics.Outbox.WithLabelValues("refused").Inc()
			_ = rej.Record(ctx, events.AuditItemID(m.RunID, m.Step, supervisor.EventOutboxRefused, m.Token, m.Key, int(m.Requeue)),
				events.Audit{RunID: m.RunID, Step: m.Step, Event: supervisor.EventOutboxRefused, Token: m.Token, Item: m.Key, Detail: clip(err.Error(), 400)})
		},
		Rejected: func(ctx context.Context, m jetstream.Msg, reason error) {
			d.Metrics.Outbox.WithLabelValues("rejected").Inc()
			meta, _ := m.Metadata()
			var seq uint64
			if meta != nil {
				seq = meta.Sequence.Stream
			}
			nm := &nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}
			_ = rej.Reject(ctx, events.RejectedID(assets.StreamOutbox, seq), "", events.NewRejected(assets.StreamOutbox, seq, nm, reason.Error()))
		},
	})
	if err != nil {
		return err
	}
	return s.Run(ctx)
}

// outboxBacklog reads the outbox-sender consumer's backlog at scrape time; -1 when it cannot.
func (d *Deps) outboxBacklog(ctx context.Context) func() float64 {
	return func() float64 {
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		c, err := d.JS.Consumer(qctx, assets.StreamOutbox, assets.ConsumerOutbox)
		if err != nil {
			return -1
		}
		info, err := c.Info(qctx)
		if err != nil {
			return -1
		}
		return float64(info.NumPending) + float64(info.NumAckPending)
	}
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// countingTransport counts the messages handed to the outside system.
type countingTransport struct {
	outbox.Transport
	m *metrics.Metrics
}

func (t countingTransport) Deliver(ctx context.Context, m outbox.Message, raw []byte) error {
	err := t.Transport.Deliver(ctx, m, raw)
	if err == nil {
		t.m.Outbox.WithLabelValues("sent").Inc()
	}
	return err
}

// The one sender of Cairn's mail, and the finance mailbox the night's report goes to.
const (
	mailFrom  = app.DefaultFrom
	financeTo = "finance-head@cairn.local"
)

// allow is whom the outbox sender may send as and to: from mailFrom, the night's mail to
// the recipients its steps derive, notices to CAIRN_NOTIFY_EMAIL and CAIRN_NOTIFY_WEBHOOK.
func (c Config) allow() outbox.Allow {
	steps := night.Recipients(financeTo)
	return outbox.Allow{From: mailFrom, Webhook: c.NotifyWebhook, Mail: func(kind, to string) bool {
		if kind == outbox.KindHandover || kind == outbox.KindApproval {
			return c.NotifyEmail != "" && to == c.NotifyEmail
		}
		return steps(kind, to)
	}}
}

// notices are where the night's handover and approval notices go (app.Notices, the one
// home of their messages): CAIRN_NOTIFY_EMAIL and CAIRN_NOTIFY_WEBHOOK, sent as mailFrom.
func (c Config) notices() app.Notices {
	return app.Notices{Email: c.NotifyEmail, Webhook: c.NotifyWebhook, Secret: []byte(c.NotifySecret), From: mailFrom}
}
