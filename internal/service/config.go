// Package service wires Cairn's services from the environment: configuration, the NATS
// connection, the assets check, and the run loop of each service.
package service

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/cairnhq/cairn/internal/books"
	"github.com/cairnhq/cairn/internal/night"
	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/assets"
)

// Config is read from the environment (prefix CAIRN_), only in mains.
type Config struct {
	NATSURL         Credentials   `envconfig:"NATS_URL" default:"nats://127.0.0.1:4222"`
	NATSCreds       string        `envconfig:"NATS_CREDS"`
	InboxPrefix     string        `envconfig:"INBOX_PREFIX" default:"_INBOX.cairn"`
	DataDir         string        `envconfig:"DATA_DIR" default:"./.cairn"`
	InboxDir        string        `envconfig:"INBOX_DIR"`
	LedgerDSN       Credentials   `envconfig:"LEDGER_DSN"`
	ERPDSN          Credentials   `envconfig:"ERP_DSN"`
	SMTPAddr        string        `envconfig:"SMTP_ADDR"`
	MailDir         string        `envconfig:"MAIL_DIR"`
	Heartbeat       time.Duration `envconfig:"HEARTBEAT" default:"5s"`
	Lease           time.Duration `envconfig:"LEASE" default:"15s"`
	AckWait         time.Duration `envconfig:"ACK_WAIT" default:"30s"`
	MaxDeliver      int           `envconfig:"MAX_DELIVER" default:"20"`
	RetryAttempts   int           `envconfig:"RETRY_ATTEMPTS" default:"3"`
	LoopGuard       int           `envconfig:"LOOP_GUARD" default:"3"`
	ParkLimit       float64       `envconfig:"PARK_LIMIT" default:"0.1"`
	StallTimeout    time.Duration `envconfig:"STALL_TIMEOUT" default:"10m"`
	ReassignLimit   int           `envconfig:"REASSIGN_LIMIT" default:"5"`
	OutboxStall     time.Duration `envconfig:"OUTBOX_STALL" default:"15m"`
	OutboxBackoff   time.Duration `envconfig:"OUTBOX_BACKOFF" default:"5s"`
	StopGrace       time.Duration `envconfig:"STOP_GRACE" default:"10s"`
	StepConcurrency int           `envconfig:"STEP_CONCURRENCY" default:"1"`
	TakeoverGap     time.Duration `envconfig:"TAKEOVER_GAP" default:"500ms"`
	ApprovalSteps   []string      `envconfig:"APPROVAL_STEPS"`
	ApprovalTimeout time.Duration `envconfig:"APPROVAL_TIMEOUT" default:"24h"`
	Replicas        int           `envconfig:"REPLICAS" default:"1"`
	MetricsAddr     string        `envconfig:"METRICS_ADDR"`
	ModelURL        string        `envconfig:"MODEL_URL"`
	ModelName       string        `envconfig:"MODEL_NAME"`
	ModelKey        Secret        `envconfig:"MODEL_KEY"`
	ModelRPS        float64       `envconfig:"MODEL_RPS" default:"5"`
	ModelTimeout    time.Duration `envconfig:"MODEL_TIMEOUT" default:"60s"`
	// The ledger over HTTP (services/ledger-api): post-ledger and the compensator write
	// through it instead of CAIRN_LEDGER_DSN, under a shared limit of LedgerRPS calls a
	// second.
	LedgerURL     string        `envconfig:"LEDGER_URL"`
	LedgerRPS     float64       `envconfig:"LEDGER_RPS" default:"200"`
	LedgerTimeout time.Duration `envconfig:"LEDGER_TIMEOUT" default:"30s"`
	// LedgerOutage is how long a call waits for a ledger that does not answer, within
	// the step's attempt, before the attempt fails (ledgerapi.ClientConfig.Outage).
	LedgerOutage   time.Duration `envconfig:"LEDGER_OUTAGE" default:"2m"`
	NotifyEmail    string        `envconfig:"NOTIFY_EMAIL"`
	NotifyWebhook  string        `envconfig:"NOTIFY_WEBHOOK"`
	NotifySecret   Secret        `envconfig:"NOTIFY_SECRET"`
	Faults         string        `envconfig:"FAULTS"`
	SigningSeed    string        `envconfig:"SIGNING_SEED"`     // the one service's seed (keys.go)
	SigningSeedDir string        `envconfig:"SIGNING_SEED_DIR"` // <service>.seed files

	// Bounded sizes: the largest document extract reads (a larger one is parked).
	MaxDocumentBytes int64 `envconfig:"MAX_DOCUMENT_BYTES" default:"4194304"`
	// The NATS assets' sizes, which cairn init sets (assets.Limits; 0: the default).
	MaxRunsBytes     int64 `envconfig:"MAX_RUNS_BYTES"`
	MaxMemoBytes     int64 `envconfig:"MAX_MEMO_BYTES"`
	MaxBucketBytes   int64 `envconfig:"MAX_BUCKET_BYTES"`
	MaxArtifactBytes int64 `envconfig:"MAX_ARTIFACT_BYTES"`
	MaxQueueBytes    int64 `envconfig:"MAX_QUEUE_BYTES"`
	MaxSagaBytes     int64 `envconfig:"MAX_SAGA_BYTES"`
	MaxOutboxBytes   int64 `envconfig:"MAX_OUTBOX_BYTES"`
}

// Limits are the assets' sizes the CAIRN_MAX_*_BYTES settings give.
func (c Config) Limits() assets.Limits {
	return assets.Limits{Runs: c.MaxRunsBytes, Memo: c.MaxMemoBytes, Buckets: c.MaxBucketBytes, Artifacts: c.MaxArtifactBytes,
		Queues: c.MaxQueueBytes, Saga: c.MaxSagaBytes, Outbox: c.MaxOutboxBytes}
}

// Load reads the environment, fills the derived defaults and validates.
func Load() (Config, error) {
	var c Config
	if err := envconfig.Process("cairn", &c); err != nil {
		return c, settingError{fmt.Errorf("configuration: %w", err)}
	}
	c.fill()
	return c, c.Validate()
}

func (c *Config) fill() {
	if c.InboxDir == "" {
		c.InboxDir = filepath.Join(c.DataDir, "inbox")
	}
	if c.LedgerDSN == "" {
		c.LedgerDSN = Credentials("sqlite:" + filepath.Join(c.DataDir, "ledger.db"))
	}
	if c.ERPDSN == "" {
		c.ERPDSN = Credentials("sqlite:" + filepath.Join(c.DataDir, "erp.db"))
	}
	if c.MailDir == "" {
		c.MailDir = filepath.Join(c.DataDir, "mail")
	}
	if c.SigningSeedDir == "" {
		c.SigningSeedDir = filepath.Join(c.DataDir, "keys")
	}
}

// The ranges of the settings: no duration longer than a year (sums and multiples of them
// stay far from overflowing), no more model calls a second than one limit's bucket books.
const (
	maxSetting  = 365 * 24 * time.Hour
	maxModelRPS = 1000
)

// Validate returns one sentence per broken rule, naming the variable; every error is
// ErrSetting.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if err := checkNATSURL(c.NATSURL); err != nil {
		errs = append(errs, err)
	}
	if !validSubject(c.InboxPrefix) {
		bad("CAIRN_INBOX_PREFIX %q must be a subject without wildcards, like _INBOX.cairn", c.InboxPrefix)
	}
	for _, db := range []struct {
		name string
		dsn  Credentials
	}{{"CAIRN_LEDGER_DSN", c.LedgerDSN}, {"CAIRN_ERP_DSN", c.ERPDSN}} {
		if err := books.CheckDSN(string(db.dsn)); err != nil {
			bad("%s: %w", db.name, err)
		}
	}
	// Every duration lies within (0, maxSetting], so that no sum or multiple of them
	// overflows; the rules between them follow.
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"CAIRN_HEARTBEAT", c.Heartbeat}, {"CAIRN_LEASE", c.Lease}, {"CAIRN_ACK_WAIT", c.AckWait},
		{"CAIRN_STALL_TIMEOUT", c.StallTimeout}, {"CAIRN_OUTBOX_STALL", c.OutboxStall}, {"CAIRN_OUTBOX_BACKOFF", c.OutboxBackoff},
		{"CAIRN_STOP_GRACE", c.StopGrace}, {"CAIRN_TAKEOVER_GAP", c.TakeoverGap},
		{"CAIRN_MODEL_TIMEOUT", c.ModelTimeout}, {"CAIRN_LEDGER_TIMEOUT", c.LedgerTimeout},
		{"CAIRN_LEDGER_OUTAGE", c.LedgerOutage}} {
		if d.v <= 0 || d.v > maxSetting {
			bad("%s must be positive and at most %s, not %s", d.name, maxSetting, d.v)
		}
	}
	if c.Lease < 3*c.Heartbeat {
		bad("CAIRN_LEASE (%s) must be at least 3 × CAIRN_HEARTBEAT (%s)", c.Lease, c.Heartbeat)
	}
	if c.AckWait < c.Lease {
		bad("CAIRN_ACK_WAIT (%s) must be at least CAIRN_LEASE (%s)", c.AckWait, c.Lease)
	}
	for _, n := range []struct {
		name        string
		v, min, max int
	}{{"CAIRN_MAX_DELIVER", c.MaxDeliver, 2, 10000}, {"CAIRN_RETRY_ATTEMPTS", c.RetryAttempts, 1, 100},
		{"CAIRN_LOOP_GUARD", c.LoopGuard, 1, 1000}, {"CAIRN_REASSIGN_LIMIT", c.ReassignLimit, 1, 1000},
		{"CAIRN_STEP_CONCURRENCY", c.StepConcurrency, 1, 1000}} {
		if n.v < n.min || n.v > n.max {
			bad("%s must be between %d and %d, not %d", n.name, n.min, n.max, n.v)
		}
	}
	// NaN fails every comparison: each float is checked for lying within its range.
	if !(c.ParkLimit >= 0 && c.ParkLimit <= 1) {
		bad("CAIRN_PARK_LIMIT must be between 0 (no item may be parked) and 1, not %v", c.ParkLimit)
	}
	if !(c.ModelRPS > 0 && c.ModelRPS <= maxModelRPS) {
		bad("CAIRN_MODEL_RPS must be above 0 and at most %d calls per second, not %v", maxModelRPS, c.ModelRPS)
	}
	if !(c.LedgerRPS > 0 && c.LedgerRPS <= maxModelRPS) {
		bad("CAIRN_LEDGER_RPS must be above 0 and at most %d calls per second, not %v", maxModelRPS, c.LedgerRPS)
	}
	if c.LedgerURL != "" {
		u, err := url.Parse(c.LedgerURL)
		switch {
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.Port() == "" || strings.Trim(u.Path, "/") != "":
			// Not err: url.Parse's error repeats the URL.
			bad("CAIRN_LEDGER_URL must be http://HOST:PORT or https://HOST:PORT of services/ledger-api, with no path")
		case u.User != nil || u.RawQuery != "" || u.Fragment != "":
			bad("CAIRN_LEDGER_URL must carry no user, password, query or fragment: only http(s)://HOST:PORT")
		}
	}
	if c.Replicas != 1 && c.Replicas != 3 && c.Replicas != 5 {
		bad("CAIRN_REPLICAS must be 1, 3 or 5, not %d", c.Replicas)
	}
	if c.StallTimeout <= c.Lease {
		bad("CAIRN_STALL_TIMEOUT (%s) must be longer than CAIRN_LEASE (%s)", c.StallTimeout, c.Lease)
	}
	if c.OutboxBackoff < 100*time.Millisecond || c.OutboxBackoff > c.AckWait {
		bad("CAIRN_OUTBOX_BACKOFF (%s) must be between 100ms and CAIRN_ACK_WAIT (%s)", c.OutboxBackoff, c.AckWait)
	}
	if c.TakeoverGap >= c.Lease {
		bad("CAIRN_TAKEOVER_GAP (%s) must be shorter than CAIRN_LEASE (%s)", c.TakeoverGap, c.Lease)
	}
	for _, s := range c.ApprovalSteps {
		if !slices.Contains(night.Pipeline.Names(), s) {
			bad("CAIRN_APPROVAL_STEPS names %q, which is not a step of the pipeline %v", s, night.Pipeline.Names())
		}
	}
	// The settings every pipeline's process takes (approvals, notices, their mail, the
	// metrics' address) are checked as any hosted pipeline's are.
	if err := c.shared().Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.ModelURL != "" {
		if u, err := url.Parse(c.ModelURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("CAIRN_MODEL_URL %q must be an http(s) base URL such as https://api.openai.com/v1", c.ModelURL)
		}
		if c.ModelName == "" {
			bad("CAIRN_MODEL_NAME must name the model when CAIRN_MODEL_URL is set")
		}
	}
	// Bounded sizes.
	if c.MaxDocumentBytes < 1<<10 || c.MaxDocumentBytes > 1<<30 {
		bad("CAIRN_MAX_DOCUMENT_BYTES must be between 1024 and 1073741824 (1 GiB), not %d", c.MaxDocumentBytes)
	}
	for _, l := range []struct {
		name string
		n    int64
	}{{"CAIRN_MAX_RUNS_BYTES", c.MaxRunsBytes}, {"CAIRN_MAX_MEMO_BYTES", c.MaxMemoBytes}, {"CAIRN_MAX_BUCKET_BYTES", c.MaxBucketBytes}, {"CAIRN_MAX_ARTIFACT_BYTES", c.MaxArtifactBytes},
		{"CAIRN_MAX_QUEUE_BYTES", c.MaxQueueBytes}, {"CAIRN_MAX_SAGA_BYTES", c.MaxSagaBytes}, {"CAIRN_MAX_OUTBOX_BYTES", c.MaxOutboxBytes}} {
		if l.n != 0 && l.n < assets.MinLimitBytes {
			bad("%s must be at least %d (1 MiB), or unset for its default, not %d", l.name, assets.MinLimitBytes, l.n)
		}
	}
	if len(errs) > 0 {
		return settingError{errors.Join(errs...)}
	}
	return nil
}

// shared is c's share of the settings every hosted pipeline takes (app.Settings).
func (c Config) shared() app.Settings {
	return app.Settings{ApprovalSteps: c.ApprovalSteps, ApprovalTimeout: c.ApprovalTimeout, NotifyEmail: c.NotifyEmail,
		NotifyWebhook: c.NotifyWebhook, NotifySecret: string(c.NotifySecret), SMTPAddr: c.SMTPAddr, MailDir: c.MailDir, MetricsAddr: c.MetricsAddr}
}

// RunnerParkLimit is CAIRN_PARK_LIMIT as the runner takes it. The runner's zero is its
// default (0.1), so 0, no item may be parked, is passed as the smallest share above it:
// one parked item is over it.
func (c Config) RunnerParkLimit() float64 {
	if c.ParkLimit == 0 {
		return math.SmallestNonzeroFloat64
	}
	return c.ParkLimit
}

// Inbox is the prefix of the reply subjects of service name's connection: CAIRN_INBOX_PREFIX,
// then the name. A service user's permissions need allow only its own replies, <Inbox>.>.
func (c Config) Inbox(name string) string { return c.InboxPrefix + "." + name }

// checkNATSURL checks CAIRN_NATS_URL: nats:// or tls:// URLs with a host, comma-separated.
// The error does not wrap url.Parse's, which repeats the URL, password and all.
func checkNATSURL(urls Credentials) error {
	for u := range strings.SplitSeq(string(urls), ",") {
		if p, err := url.Parse(strings.TrimSpace(u)); err != nil || (p.Scheme != "nats" && p.Scheme != "tls") || p.Host == "" {
			return fmt.Errorf("CAIRN_NATS_URL %q must be nats:// or tls:// URLs, comma-separated", urls)
		}
	}
	return nil
}

// validSubject says whether s is a literal subject: dot-separated, non-empty tokens without
// wildcards or white space.
func validSubject(s string) bool {
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n*>") {
			return false
		}
	}
	return true
}
