package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/cairnhq/cairn/internal/night"
	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/tracing"
)

// Services lists every service a deployment runs.
func Services() []string {
	return append(night.Pipeline.Names(), "outbox-sender", "supervisor", "compensator")
}

// Main is the whole of a service's main: it reads the configuration, connects, checks the
// assets, and runs the named services until SIGINT or SIGTERM. It exits 0 on a clean stop,
// 2 on a wrong setting, 1 on any other failure.
func Main(names ...string) {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	c, err := Load()
	if err == nil {
		_, err = c.Signers(names...)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ready := func() { fmt.Println("ready") }
	if err := Run(ctx, c, log, ready, names...); err != nil {
		log.Error("service stopped", slog.Any("error", err))
		if errors.Is(err, ErrSetting) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// Run connects and runs the named services until ctx ends. It calls ready once every
// dependency is open: connected, the assets checked, the databases opened and pinged (a
// service's process prints "ready" on its standard output).
func Run(ctx context.Context, c Config, log *slog.Logger, ready func(), names ...string) error {
	shutdown, err := tracing.Setup(ctx, names[0])
	if err != nil {
		return err
	}
	defer flush(shutdown)
	nc, js, err := Connect(c, names[0])
	if err != nil {
		return err
	}
	defer nc.Close()
	d, err := Open(ctx, c, js, log)
	if err != nil {
		return err
	}
	d.Ready = ready
	return d.RunAll(ctx, names...)
}

// flush sends the spans still buffered, within a bound.
func flush(shutdown func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = shutdown(ctx)
}

// RunAll runs the named services in one process until ctx ends. A service that stops by
// itself (a consume loop that ended: its durable deleted, the connection closed) makes the
// process unready at once, naming it, then stops the others, within a bound, and RunAll
// returns its error: the process exits non-zero and its supervisor (systemd, Kubernetes,
// compose) restarts it.
func (d *Deps) RunAll(ctx context.Context, names ...string) (err error) {
	if d.signers, err = d.Config.Signers(names...); err != nil {
		return err
	}
	env, closeEnv, err := d.NightEnv(ctx, names...)
	if err != nil {
		return err
	}
	defer closeEnv()
	// The night is a pipeline on the framework's host, which makes each of its services.
	for _, name := range names {
		if !slices.Contains(Services(), name) {
			return fmt.Errorf("unknown service %q", name)
		}
	}
	ac, err := d.appConfig(env)
	if err != nil {
		return err
	}
	host, err := app.Open(ctx, ac)
	if err != nil {
		return err
	}
	runs := make(map[string]func(context.Context) error, len(names))
	for _, name := range names {
		if runs[name], err = host.Service(name); err != nil {
			return err
		}
	}
	if d.Ready != nil {
		d.Ready()
	}
	d.running.Store(true)
	defer d.running.Store(false)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	g, gctx := errgroup.WithContext(ctx)
	for _, name := range names {
		g.Go(func() error {
			err := runs[name](gctx)
			if err == nil && gctx.Err() == nil {
				err = errReturned
			}
			if err != nil {
				err = fmt.Errorf("service %s stopped: %w", name, err)
				d.fail(err)
			}
			return err
		})
	}
	done := make(chan error, 1)
	go func() { done <- g.Wait() }()
	select {
	case err := <-done:
		return err
	case <-d.failed:
	}
	// A service failed: the others stop, each within its own bound; this bounds them all.
	cancel(d.failure())
	limit := d.Config.StopGrace + 15*time.Second
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("%w (the other services did not stop within %s)", d.failure(), limit)
	}
}
