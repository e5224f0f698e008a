// Package service wires Cairn's services from the environment: configuration, the NATS
// connection, the assets check, and the run loop of each service.
package service

import (
	"errors"
	"fmt"
	"net/mail"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/cairnhq/cairn/internal/night"
)

// Config is read from the environment (prefix CAIRN_), only in mains.
type Config struct {
	NATSURL         string        `envconfig:"NATS_URL" default:"nats://127.0.0.1:4222"`
	NATSCreds       string        `envconfig:"NATS_CREDS"`
	InboxPrefix     string        `envconfig:"INBOX_PREFIX" default:"_INBOX.cairn"`
	DataDir         string        `envconfig:"DATA_DIR" default:"./.cairn"`
	InboxDir        string        `envconfig:"INBOX_DIR"`
	LedgerDSN       string        `envconfig:"LEDGER_DSN"`
	ERPDSN          string        `envconfig:"ERP_DSN"`
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
	ModelKey        string        `envconfig:"MODEL_KEY"`
	ModelRPS        float64       `envconfig:"MODEL_RPS" default:"5"`
	ModelTimeout    time.Duration `envconfig:"MODEL_TIMEOUT" default:"60s"`
	NotifyEmail     string        `envconfig:"NOTIFY_EMAIL"`
	NotifyWebhook   string        `envconfig:"NOTIFY_WEBHOOK"`
	NotifySecret    string        `envconfig:"NOTIFY_SECRET"`
	Faults          string        `envconfig:"FAULTS"`
	SigningSeed     string        `envconfig:"SIGNING_SEED"`     // the one service's seed (keys.go)
	SigningSeedDir  string        `envconfig:"SIGNING_SEED_DIR"` // <service>.seed files
}

// Load reads the environment, fills the derived defaults and validates.
func Load() (Config, error) {
	var c Config
	if err := envconfig.Process("cairn", &c); err != nil {
		return c, fmt.Errorf("configuration: %w", err)
	}
	c.fill()
	return c, c.Validate()
}

func (c *Config) fill() {
	if c.InboxDir == "" {
		c.InboxDir = filepath.Join(c.DataDir, "inbox")
	}
	if c.LedgerDSN == "" {
		c.LedgerDSN = "sqlite:" + filepath.Join(c.DataDir, "ledger.db")
	}
	if c.ERPDSN == "" {
		c.ERPDSN = "sqlite:" + filepath.Join(c.DataDir, "erp.db")
	}
	if c.MailDir == "" {
		c.MailDir = filepath.Join(c.DataDir, "mail")
	}
	if c.SigningSeedDir == "" {
		c.SigningSeedDir = filepath.Join(c.DataDir, "keys")
	}
}

// Validate returns one sentence per broken rule, naming the variable.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !strings.HasPrefix(c.NATSURL, "nats://") && !strings.HasPrefix(c.NATSURL, "tls://") {
		bad("CAIRN_NATS_URL %q must start with nats:// or tls://", c.NATSURL)
	}
	if !validSubject(c.InboxPrefix) {
		bad("CAIRN_INBOX_PREFIX %q must be a subject without wildcards, like _INBOX.cairn", c.InboxPrefix)
	}
	if c.Heartbeat <= 0 {
		bad("CAIRN_HEARTBEAT must be positive, not %s", c.Heartbeat)
	}
	if c.Lease < 3*c.Heartbeat {
		bad("CAIRN_LEASE (%s) must be at least 3 × CAIRN_HEARTBEAT (%s)", c.Lease, c.Heartbeat)
	}
	if c.AckWait < c.Lease {
		bad("CAIRN_ACK_WAIT (%s) must be at least CAIRN_LEASE (%s)", c.AckWait, c.Lease)
	}
	if c.MaxDeliver < 2 {
		bad("CAIRN_MAX_DELIVER must be at least 2, not %d", c.MaxDeliver)
	}
	if c.RetryAttempts < 1 {
		bad("CAIRN_RETRY_ATTEMPTS must be at least 1, not %d", c.RetryAttempts)
	}
	if c.LoopGuard < 1 {
		bad("CAIRN_LOOP_GUARD must be at least 1, not %d", c.LoopGuard)
	}
	if c.ParkLimit < 0 || c.ParkLimit > 1 {
		bad("CAIRN_PARK_LIMIT must be between 0 and 1, not %v", c.ParkLimit)
	}
	if c.Replicas != 1 && c.Replicas != 3 && c.Replicas != 5 {
		bad("CAIRN_REPLICAS must be 1, 3 or 5, not %d", c.Replicas)
	}
	if c.StallTimeout <= c.Lease {
		bad("CAIRN_STALL_TIMEOUT (%s) must be longer than CAIRN_LEASE (%s)", c.StallTimeout, c.Lease)
	}
	if c.OutboxStall <= 0 {
		bad("CAIRN_OUTBOX_STALL must be positive, not %s", c.OutboxStall)
	}
	if c.OutboxBackoff < 100*time.Millisecond || c.OutboxBackoff > c.AckWait {
		bad("CAIRN_OUTBOX_BACKOFF (%s) must be between 100ms and CAIRN_ACK_WAIT (%s)", c.OutboxBackoff, c.AckWait)
	}
	if c.ReassignLimit < 1 {
		bad("CAIRN_REASSIGN_LIMIT must be at least 1, not %d", c.ReassignLimit)
	}
	for _, s := range c.ApprovalSteps {
		if !slices.Contains(night.Pipeline.Names(), s) {
			bad("CAIRN_APPROVAL_STEPS names %q, which is not a step of the pipeline %v", s, night.Pipeline.Names())
		}
	}
	if c.ApprovalTimeout <= 0 {
		bad("CAIRN_APPROVAL_TIMEOUT must be positive, not %s", c.ApprovalTimeout)
	}
	if c.StepConcurrency < 1 || c.StepConcurrency > 1000 {
		bad("CAIRN_STEP_CONCURRENCY must be between 1 and 1000 (the step consumers' max ack pending), not %d", c.StepConcurrency)
	}
	if c.StopGrace <= 0 {
		bad("CAIRN_STOP_GRACE must be positive, not %s", c.StopGrace)
	}
	if c.TakeoverGap <= 0 {
		bad("CAIRN_TAKEOVER_GAP must be positive, not %s", c.TakeoverGap)
	}
	if c.NotifyEmail != "" {
		if _, err := mail.ParseAddress(c.NotifyEmail); err != nil {
			bad("CAIRN_NOTIFY_EMAIL %q is not a mail address", c.NotifyEmail)
		}
	}
	if c.NotifyWebhook != "" {
		if u, err := url.Parse(c.NotifyWebhook); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("CAIRN_NOTIFY_WEBHOOK %q must be an http(s) URL", c.NotifyWebhook)
		}
		if c.NotifySecret == "" {
			bad("CAIRN_NOTIFY_SECRET must be set with CAIRN_NOTIFY_WEBHOOK: every call is signed with it")
		}
	}
	if c.ModelURL != "" {
		if u, err := url.Parse(c.ModelURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("CAIRN_MODEL_URL %q must be an http(s) base URL such as https://api.openai.com/v1", c.ModelURL)
		}
		if c.ModelName == "" {
			bad("CAIRN_MODEL_NAME must name the model when CAIRN_MODEL_URL is set")
		}
		if c.ModelRPS <= 0 {
			bad("CAIRN_MODEL_RPS must be positive, not %v", c.ModelRPS)
		}
		if c.ModelTimeout <= 0 {
			bad("CAIRN_MODEL_TIMEOUT must be positive, not %s", c.ModelTimeout)
		}
	}
	return errors.Join(errs...)
}

// Inbox is the prefix of the reply subjects of service name's connection: CAIRN_INBOX_PREFIX,
// then the name. A service user's permissions need allow only its own replies, <Inbox>.>.
func (c Config) Inbox(name string) string { return c.InboxPrefix + "." + name }

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
