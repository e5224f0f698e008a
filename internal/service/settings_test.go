package service

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/internal/pgtest"
	"github.com/cairnhq/cairn/pkg/assets"
)

// Every numeric setting refuses NaN, infinities and values outside its range, naming the
// variable, and the error is ErrSetting (exit 2).
func TestSettingsRefuseNaNAndOutOfRange(t *testing.T) {
	cases := []struct{ variable, value string }{
		{"CAIRN_PARK_LIMIT", "NaN"},
		{"CAIRN_PARK_LIMIT", "Inf"},
		{"CAIRN_PARK_LIMIT", "-0.1"},
		{"CAIRN_MODEL_RPS", "NaN"},
		{"CAIRN_MODEL_RPS", "+Inf"},
		{"CAIRN_MODEL_RPS", "0"},
		{"CAIRN_MODEL_RPS", "1e6"},
		{"CAIRN_HEARTBEAT", "-1s"},
		{"CAIRN_HEARTBEAT", "2000000h"}, // 3 × it overflows: the lease rule would pass
		{"CAIRN_APPROVAL_TIMEOUT", "0s"},
		{"CAIRN_APPROVAL_TIMEOUT", "10000h"},
		{"CAIRN_MODEL_TIMEOUT", "0s"},
		{"CAIRN_TAKEOVER_GAP", "-1ms"},
		{"CAIRN_TAKEOVER_GAP", "20s"}, // not shorter than the lease
		{"CAIRN_MAX_DELIVER", "1"},
		{"CAIRN_MAX_DELIVER", "1000000"},
		{"CAIRN_RETRY_ATTEMPTS", "0"},
		{"CAIRN_RETRY_ATTEMPTS", "1000"},
		{"CAIRN_LOOP_GUARD", "0"},
		{"CAIRN_REASSIGN_LIMIT", "-3"},
		{"CAIRN_STEP_CONCURRENCY", "1001"},
		{"CAIRN_LEDGER_DSN", "mysql://x"},
		{"CAIRN_ERP_DSN", "sqlite:"},
		{"CAIRN_SMTP_ADDR", "smtp.example.com"},
		{"CAIRN_NOTIFY_WEBHOOK", "https://user:pw@hooks.example.com/x"},
		{"CAIRN_LEDGER_URL", "ledger-api:8080"},
		{"CAIRN_LEDGER_URL", "ftp://ledger-api:8080"},
		{"CAIRN_LEDGER_URL", "http://ledger-api"}, // no port
		{"CAIRN_LEDGER_URL", "http://ledger-api:8080/v1"},
		{"CAIRN_LEDGER_URL", "http://u:pw@ledger-api:8080"},
		{"CAIRN_LEDGER_URL", "http://ledger-api:8080?x=1"},
		{"CAIRN_LEDGER_RPS", "0"},
		{"CAIRN_LEDGER_RPS", "NaN"},
		{"CAIRN_LEDGER_TIMEOUT", "0s"},
		{"CAIRN_LEDGER_OUTAGE", "-1s"},
	}
	for _, c := range cases {
		t.Run(c.variable+"="+c.value, func(t *testing.T) {
			t.Setenv(c.variable, c.value)
			t.Setenv("CAIRN_NOTIFY_SECRET", "s")
			_, err := Load()
			if err == nil || !strings.Contains(err.Error(), c.variable) {
				t.Fatalf("Load with %s=%s: %v, want an error naming %s", c.variable, c.value, err, c.variable)
			}
			if !errors.Is(err, ErrSetting) {
				t.Fatalf("Load with %s=%s: %v is not ErrSetting (exit 2)", c.variable, c.value, err)
			}
		})
	}
}

// A ledger URL of the form the README gives is taken, with a trailing slash too.
func TestLedgerURLTaken(t *testing.T) {
	for _, u := range []string{"http://127.0.0.1:8090", "https://ledger.internal:443/"} {
		t.Setenv("CAIRN_LEDGER_URL", u)
		if _, err := Load(); err != nil {
			t.Errorf("CAIRN_LEDGER_URL=%s: %v", u, err)
		}
	}
}

// CAIRN_PARK_LIMIT=0 means no item may be parked: the runner gets a limit that one parked
// item exceeds, not its default of 0.1.
func TestParkLimitZeroParksNothing(t *testing.T) {
	t.Setenv("CAIRN_PARK_LIMIT", "0")
	c, err := Load()
	if err != nil {
		t.Fatalf("Load with CAIRN_PARK_LIMIT=0: %v", err)
	}
	got := c.RunnerParkLimit()
	if got <= 0 {
		t.Fatalf("runner park limit %v: the runner would take its default 0.1", got)
	}
	if items := 1_000_000.0; !(1 > got*items) || 0 > got*items {
		t.Fatalf("runner park limit %v: one parked item of a million is not over it", got)
	}
	t.Setenv("CAIRN_PARK_LIMIT", "0.25")
	if c, _ := Load(); c.RunnerParkLimit() != 0.25 {
		t.Fatalf("runner park limit %v, want 0.25", c.RunnerParkLimit())
	}
}

// A secret never shows: not through any verb of fmt, not in a log line, not in JSON; a
// DSN or server list shows everything but its password.
func TestSecretsAreRedacted(t *testing.T) {
	const pw = "hunter2-Pa55"
	t.Setenv("CAIRN_NATS_URL", "tls://svc:"+pw+"@nats-1:4222,tls://svc:"+pw+"@nats-2:4222")
	t.Setenv("CAIRN_LEDGER_DSN", "postgres://post_ledger:"+pw+"@db:5432/ledger")
	t.Setenv("CAIRN_ERP_DSN", "postgres://update_stock:"+pw+"@db:5432/erp")
	t.Setenv("CAIRN_MODEL_KEY", pw)
	t.Setenv("CAIRN_NOTIFY_WEBHOOK", "https://hooks.example.com/cairn")
	t.Setenv("CAIRN_NOTIFY_SECRET", pw)
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	var logged strings.Builder
	log := slog.New(slog.NewJSONHandler(&logged, nil))
	log.Info("settings", slog.Any("config", c), slog.Any("dsn", c.LedgerDSN), slog.Any("key", c.ModelKey), "secret", c.NotifySecret)
	js, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	shown := map[string]string{
		"%v": fmt.Sprintf("%v", c), "%+v": fmt.Sprintf("%+v", c), "%#v": fmt.Sprintf("%#v", c), "%s": fmt.Sprintf("%s", c.ModelKey),
		"%q": fmt.Sprintf("%q", c.NotifySecret), "%x": fmt.Sprintf("%x", c.ModelKey), "%q dsn": fmt.Sprintf("%q", c.ERPDSN),
		"String": c.NATSURL.String(), "slog": logged.String(), "json": string(js),
	}
	for how, text := range shown {
		if strings.Contains(text, pw) {
			t.Errorf("%s shows the password: %s", how, text)
		}
	}
	if got, want := c.LedgerDSN.String(), "postgres://post_ledger:xxxxx@db:5432/ledger"; got != want {
		t.Errorf("DSN shown as %q, want %q", got, want)
	}
	if got, want := c.NATSURL.String(), "tls://svc:xxxxx@nats-1:4222,tls://svc:xxxxx@nats-2:4222"; got != want {
		t.Errorf("server list shown as %q, want %q", got, want)
	}
	if got := fmt.Sprint(c.ModelKey); got != "[redacted]" {
		t.Errorf("model key shown as %q", got)
	}
	if string(c.NotifySecret) != pw || string(c.LedgerDSN) != "postgres://post_ledger:"+pw+"@db:5432/ledger" {
		t.Error("the values themselves are lost")
	}
	if got := fmt.Sprint(Secret("")); got != "" {
		t.Errorf("an unset secret shows as %q, want empty", got)
	}
}

// A service is ready only once its databases are open: a DSN whose database cannot be
// reached stops the service before ready, naming the variable and not the password, in
// its error and in its log.
func TestNotReadyBeforeTheDatabases(t *testing.T) {
	const pw = "s3cr@t-Pa55"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	js := natstest.JetStream(t)
	t.Setenv("CAIRN_DATA_DIR", t.TempDir())
	t.Setenv("CAIRN_NATS_URL", js.Conn().ConnectedUrl())
	cases := map[string]struct {
		service, variable, dsn string
		setting                bool // ErrSetting: the process exits 2
	}{
		// Nothing listens on port 1; the password is URL-escaped in the DSN.
		"unreachable ledger": {"post-ledger", "CAIRN_LEDGER_DSN", "postgres://post_ledger:" + url.QueryEscape(pw) + "@127.0.0.1:1/ledger?connect_timeout=5", false},
		"unreachable ERP":    {"update-stock", "CAIRN_ERP_DSN", "postgres://update_stock:" + url.PathEscape(pw) + "@127.0.0.1:1/erp?connect_timeout=5", false},
		// PostgreSQL refuses the password: another try cannot help, a setting is wrong.
		"wrong password": {"compensator", "CAIRN_LEDGER_DSN", "", true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if tc.dsn == "" { // a real server's database, under a password it refuses
				u, err := url.Parse(pgtest.DSN(t))
				if err != nil {
					t.Fatal(err)
				}
				u.User = url.UserPassword(u.User.Username(), pw)
				tc.dsn = u.String()
			}
			t.Setenv(tc.variable, tc.dsn)
			c, err := Load()
			if err != nil {
				t.Fatal(err)
			}
			if err := assets.Ensure(ctx, js, c.Assets()); err != nil {
				t.Fatal(err)
			}
			if _, err := RegisterKeys(ctx, js, c, Services()...); err != nil { // as cairn init does
				t.Fatal(err)
			}
			var logged bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&logged, nil))
			ready := false
			err = Run(ctx, c, log, func() { ready = true }, tc.service)
			if err == nil || !strings.Contains(err.Error(), tc.variable) {
				t.Fatalf("Run: %v, want an error naming %s", err, tc.variable)
			}
			if ready {
				t.Fatalf("the service said ready before %s opened", tc.variable)
			}
			if errors.Is(err, ErrSetting) != tc.setting {
				t.Fatalf("Run: %v: ErrSetting %v, want %v", err, errors.Is(err, ErrSetting), tc.setting)
			}
			for _, shown := range []string{pw, url.QueryEscape(pw), url.PathEscape(pw)} {
				if strings.Contains(err.Error(), shown) || strings.Contains(logged.String(), shown) {
					t.Fatalf("the password shows:\nerror %v\nlog %s", err, logged.String())
				}
			}
		})
	}
}
