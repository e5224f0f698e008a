package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/books"
	"github.com/cairnhq/cairn/internal/ledgerapi"
	"github.com/cairnhq/cairn/internal/recon"
	"github.com/cairnhq/cairn/internal/service"
	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/tracing"
)

func cmdInit(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("init", flag.ContinueOnError)
	tables := fs.Bool("tables", false, "also create the ledger's and the ERP's tables, as the user of CAIRN_LEDGER_DSN and CAIRN_ERP_DSN (their owner), for services that connect as roles of their own (deploy/postgres/roles)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, nc, js, err := connect("init")
	if err != nil {
		return err
	}
	defer nc.Close()
	if *tables {
		if err := createTables(ctx, c); err != nil {
			return err
		}
	}
	changed, err := assets.EnsureReport(ctx, js, c.Assets())
	if err != nil {
		return err
	}
	for _, ch := range changed {
		fmt.Println("updated " + ch)
	}
	fmt.Println("every asset exists and matches its definition")
	seal, err := service.RegisterKeys(ctx, js, c, service.Services()...)
	if err != nil {
		return err
	}
	fmt.Printf("every service's signing key is registered (seeds in %s); unsigned records accepted up to revision %d\n", c.SigningSeedDir, seal.Runs)
	return initRegistered(ctx, js)
}

func cmdDev(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	verbose := fs.Bool("v", false, "log every service's work")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := service.Load()
	if err != nil {
		return err
	}
	shutdown, err := tracing.Setup(ctx, "dev")
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdown(sctx)
	}()
	s, err := embedded(c)
	if err != nil {
		return err
	}
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	nc, js, err := service.Connect(c, "dev")
	if err != nil {
		return err
	}
	defer nc.Close()
	changed, err := assets.EnsureReport(ctx, js, c.Assets())
	if err != nil {
		return err
	}
	for _, ch := range changed { // a consumer reset after a crash, a limit lifted
		fmt.Fprintln(os.Stderr, "cairn dev: updated "+ch)
	}
	if _, err := service.RegisterKeys(ctx, js, c, service.Services()...); err != nil {
		return err
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	d, err := service.Open(ctx, c, js, log)
	if err != nil {
		return err
	}
	if !*verbose { // where the metrics are is worth its line without -v too
		d.LogServing(slog.New(slog.NewJSONHandler(os.Stderr, nil)))
	}
	d.Ready = func() { fmt.Println("ready") }
	return d.RunAll(ctx, service.Services()...)
}

// embedded starts a nats-server with JetStream on CAIRN_NATS_URL's address, storing under
// $CAIRN_DATA_DIR/nats.
func embedded(c service.Config) (*server.Server, error) {
	u, err := url.Parse(string(c.NATSURL))
	if err != nil {
		return nil, fmt.Errorf("CAIRN_NATS_URL %q is not a URL", c.NATSURL) // err would repeat its password
	}
	host, portText, err := net.SplitHostPort(u.Host)
	if err != nil {
		return nil, fmt.Errorf("CAIRN_NATS_URL %q needs host:port: %w", c.NATSURL, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, fmt.Errorf("CAIRN_NATS_URL %q: port %q: %w", c.NATSURL, portText, err)
	}
	return app.Embedded("cairn-dev", host, port, filepath.Join(c.DataDir, "nats"))
}

// createTables creates every table of the ledger and of the ERP where missing.
func createTables(ctx context.Context, c service.Config) error {
	ledger, err := books.Open(ctx, string(c.LedgerDSN))
	if err != nil {
		return fmt.Errorf("CAIRN_LEDGER_DSN: %w", err)
	}
	defer ledger.Close()
	// services/ledger-api keeps its idempotency keys next to the entries.
	if err := ledgerapi.CreateTables(ctx, ledger); err != nil {
		return fmt.Errorf("CAIRN_LEDGER_DSN: %w", err)
	}
	erp, err := books.Open(ctx, string(c.ERPDSN))
	if err != nil {
		return fmt.Errorf("CAIRN_ERP_DSN: %w", err)
	}
	defer erp.Close()
	if err := recon.CreateERPTables(ctx, erp); err != nil {
		return fmt.Errorf("CAIRN_ERP_DSN: %w", err)
	}
	fmt.Println("the ledger's (with the ledger API's keys) and the ERP's tables exist")
	return nil
}

// connect reads the settings and connects to CAIRN_NATS_URL as name.
func connect(name string) (service.Config, *nats.Conn, jetstream.JetStream, error) {
	c, err := service.Load()
	if err != nil {
		return c, nil, nil, err
	}
	nc, js, err := service.Connect(c, name)
	return c, nc, js, err
}
