package service

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A wrong setting of the ledger API is ErrSetting naming its variable.
func TestLedgerAPISettings(t *testing.T) {
	for _, tc := range []struct{ name, value, variable string }{
		{"CAIRN_LEDGER_API_ADDR", "", "CAIRN_LEDGER_API_ADDR"},
		{"CAIRN_LEDGER_API_ADDR", "localhost", "CAIRN_LEDGER_API_ADDR"},
		{"CAIRN_LEDGER_API_ADDR", "127.0.0.1:http", "CAIRN_LEDGER_API_ADDR"},
		{"CAIRN_LEDGER_API_ADDR", "127.0.0.1:70000", "CAIRN_LEDGER_API_ADDR"},
		{"CAIRN_LEDGER_API_KEY_TTL", "10s", "CAIRN_LEDGER_API_KEY_TTL"},
		{"CAIRN_LEDGER_API_KEY_TTL", "9000h", "CAIRN_LEDGER_API_KEY_TTL"},
		{"CAIRN_LEDGER_DSN", "mysql://x", "CAIRN_LEDGER_DSN"},
	} {
		t.Run(tc.name+"="+tc.value, func(t *testing.T) {
			t.Setenv("CAIRN_LEDGER_API_ADDR", "127.0.0.1:0")
			t.Setenv("CAIRN_DATA_DIR", t.TempDir())
			t.Setenv(tc.name, tc.value)
			_, err := LoadLedgerAPI()
			if !errors.Is(err, ErrSetting) || !strings.Contains(err.Error(), tc.variable) {
				t.Fatalf("LoadLedgerAPI: %v, want ErrSetting naming %s", err, tc.variable)
			}
		})
	}
	t.Run("defaults", func(t *testing.T) {
		dir := t.TempDir()
		t.Setenv("CAIRN_LEDGER_API_ADDR", "127.0.0.1:0")
		t.Setenv("CAIRN_DATA_DIR", dir)
		c, err := LoadLedgerAPI()
		if err != nil {
			t.Fatal(err)
		}
		if c.KeyTTL != 24*time.Hour || string(c.LedgerDSN) != "sqlite:"+filepath.Join(dir, "ledger.db") {
			t.Fatalf("defaults: %+v", c)
		}
	})
}

// An address the service cannot listen on stops it at start with ErrSetting naming
// CAIRN_LEDGER_API_ADDR, before it is ready.
func TestLedgerAPIAddrInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c := LedgerAPIConfig{Addr: l.Addr().String(), KeyTTL: time.Hour, DataDir: t.TempDir(), StopGrace: time.Second}
	c.LedgerDSN = Credentials("sqlite:" + filepath.Join(c.DataDir, "ledger.db"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = RunLedgerAPI(ctx, c, quiet, func(net.Addr) { t.Error("ready on an address in use") })
	if !errors.Is(err, ErrSetting) || !strings.Contains(err.Error(), "CAIRN_LEDGER_API_ADDR") {
		t.Fatalf("RunLedgerAPI: %v, want ErrSetting naming CAIRN_LEDGER_API_ADDR", err)
	}
}

// The service serves once ready and stops cleanly when its context ends.
func TestLedgerAPIRunsAndStops(t *testing.T) {
	c := LedgerAPIConfig{Addr: "127.0.0.1:0", KeyTTL: time.Hour, DataDir: filepath.Join(t.TempDir(), "data"), StopGrace: 5 * time.Second}
	c.LedgerDSN = Credentials("sqlite:" + filepath.Join(c.DataDir, "ledger.db"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- RunLedgerAPI(ctx, c, quiet, func(a net.Addr) { addrs <- a }) }()
	select {
	case <-addrs:
	case err := <-done:
		t.Fatalf("RunLedgerAPI before ready: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("not ready within a minute")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("RunLedgerAPI after stop: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("did not stop within a minute")
	}
}
