package app

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/cairnhq/cairn/pkg/outbox"
)

// Settings are the CAIRN_* environment variables every hosted pipeline takes, whatever its
// job, as the reference night takes them: the approval gates, who hears of handovers and
// waits, how their mail leaves, and where the process serves its metrics. A pipeline's main reads them with LoadSettings when it
// starts and applies them to its Config; a wrong one stops it there, naming the variable.
type Settings struct {
	ApprovalSteps   []string      `envconfig:"CAIRN_APPROVAL_STEPS"`
	ApprovalTimeout time.Duration `envconfig:"CAIRN_APPROVAL_TIMEOUT" default:"24h"`
	NotifyEmail     string        `envconfig:"CAIRN_NOTIFY_EMAIL"`
	NotifyWebhook   string        `envconfig:"CAIRN_NOTIFY_WEBHOOK"`
	NotifySecret    string        `envconfig:"CAIRN_NOTIFY_SECRET"`
	// The mail notices go to the relay at SMTPAddr (HOST:PORT), else into files under
	// MailDir (one .eml a message).
	SMTPAddr string `envconfig:"CAIRN_SMTP_ADDR"`
	MailDir  string `envconfig:"CAIRN_MAIL_DIR"`
	// MetricsAddr is where the process serves /metrics, /healthz and /readyz (Config.MetricsAddr).
	MetricsAddr string `envconfig:"CAIRN_METRICS_ADDR"`
}

// maxTimeout bounds a timeout setting: a year, far from overflowing a sum of them.
const maxTimeout = 365 * 24 * time.Hour

// LoadSettings reads the settings from the environment and checks what can be checked
// without the pipeline (Config's validation, which Init and Run do, checks the rest: the
// approval steps against the pipeline's steps).
func LoadSettings() (Settings, error) {
	var s Settings
	if err := envconfig.Process("", &s); err != nil {
		return s, fmt.Errorf("configuration: %w", err)
	}
	return s, s.Validate()
}

// Validate returns one sentence per broken rule, naming the variable.
func (s Settings) Validate() error {
	var errs []error
	if s.ApprovalTimeout <= 0 || s.ApprovalTimeout > maxTimeout {
		errs = append(errs, fmt.Errorf("CAIRN_APPROVAL_TIMEOUT must be positive and at most %s, not %s", maxTimeout, s.ApprovalTimeout))
	}
	if s.SMTPAddr != "" {
		if host, port, err := net.SplitHostPort(s.SMTPAddr); err != nil || host == "" || port == "" {
			errs = append(errs, fmt.Errorf("CAIRN_SMTP_ADDR %q must be HOST:PORT", s.SMTPAddr))
		}
	}
	if s.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(s.MetricsAddr); err != nil {
			errs = append(errs, fmt.Errorf("CAIRN_METRICS_ADDR %q must be HOST:PORT (port 0: one the kernel chooses)", s.MetricsAddr))
		}
	}
	if s.NotifyEmail != "" && s.SMTPAddr == "" && s.MailDir == "" {
		errs = append(errs, errors.New("CAIRN_NOTIFY_EMAIL needs CAIRN_SMTP_ADDR (a mail relay) or CAIRN_MAIL_DIR (a folder the mails are written to)"))
	}
	if err := s.notices().Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// notices are the settings' Notices.
func (s Settings) notices() Notices {
	n := Notices{Email: s.NotifyEmail, Webhook: s.NotifyWebhook, Secret: []byte(s.NotifySecret)}
	switch {
	case s.SMTPAddr != "":
		n.Mail = outbox.SMTPTransport{Addr: s.SMTPAddr}
	case s.MailDir != "":
		n.Mail = outbox.FileTransport{Dir: s.MailDir}
	}
	return n
}

// Apply sets c's approval gates and notices from the settings: the setting's approval steps
// join c's own, its timeout applies unless c sets one, and notices the settings send replace
// c's, keeping c's own From and Mail when it sets them.
func (s Settings) Apply(c *Config) {
	for _, step := range s.ApprovalSteps {
		if !slices.Contains(c.ApprovalSteps, step) {
			c.ApprovalSteps = append(c.ApprovalSteps, step)
		}
	}
	if c.ApprovalTimeout == 0 {
		c.ApprovalTimeout = s.ApprovalTimeout
	}
	c.MetricsAddr = cmp.Or(c.MetricsAddr, s.MetricsAddr)
	n := s.notices()
	if !n.Any() {
		return
	}
	n.From = cmp.Or(c.Notices.From, n.From)
	if c.Notices.Mail != nil {
		n.Mail = c.Notices.Mail
	}
	c.Notices = n
}
