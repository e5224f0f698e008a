package service

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/eventually"
	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/consume"
)

// Every long-running loop ends the same way when its durable is deleted under it: RunAll
// returns an error wrapping consume.ErrEnded that names the service, and /readyz answers
// 503 with that reason. A step, the compensator, the supervisor and the outbox sender
// each.
func TestALoopThatEndsMakesTheServiceUnready(t *testing.T) {
	for _, tc := range []struct{ service, stream, durable string }{
		{"match", assets.StreamSteps, "match"},
		{"compensator", assets.StreamRuns, assets.ConsumerCompensator},
		{"supervisor", assets.StreamRuns, assets.ConsumerControl},
		{"outbox-sender", assets.StreamOutbox, assets.ConsumerOutbox},
	} {
		t.Run(tc.service, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			js := natstest.JetStream(t)
			t.Setenv("CAIRN_DATA_DIR", t.TempDir())
			t.Setenv("CAIRN_NATS_URL", js.Conn().ConnectedUrl())
			t.Setenv("CAIRN_METRICS_ADDR", "127.0.0.1:0")
			t.Setenv("CAIRN_STOP_GRACE", "1s")
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
			svcCtx, stop := context.WithCancel(ctx)
			defer stop()
			d, err := Open(svcCtx, c, js, quiet)
			if err != nil {
				t.Fatal(err)
			}
			base := "http://" + d.MetricsAddr.String()
			done := make(chan error, 1)
			go func() { done <- d.RunAll(svcCtx, tc.service) }()
			waitReady(t, base, http.StatusOK, "ready", done)
			waitPulling(t, js, tc.stream, tc.durable)

			if err := js.DeleteConsumer(ctx, tc.stream, tc.durable); err != nil {
				t.Fatal(err)
			}
			var runErr error
			select {
			case runErr = <-done:
			case <-time.After(time.Minute):
				t.Fatalf("RunAll(%s) still running a minute after its durable was deleted", tc.service)
			}
			if !errors.Is(runErr, consume.ErrEnded) {
				t.Fatalf("RunAll(%s): %v, want consume.ErrEnded", tc.service, runErr)
			}
			if !strings.Contains(runErr.Error(), tc.service) || !strings.Contains(runErr.Error(), `"`+tc.durable+`"`) {
				t.Fatalf("RunAll: %q does not name the service %s and its durable %q", runErr, tc.service, tc.durable)
			}
			code, body := get(t, base+"/readyz")
			if code != http.StatusServiceUnavailable || !strings.Contains(body, "service "+tc.service+" stopped") || !strings.Contains(body, tc.durable) {
				t.Fatalf("/readyz after the loop ended: %d %q, want 503 naming service %s and durable %s", code, body, tc.service, tc.durable)
			}
		})
	}
}

// waitPulling waits until the durable has a pull request waiting: its loop consumes.
func waitPulling(t *testing.T, js jetstream.JetStream, stream, durable string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	eventually.That(t, time.Minute, "durable "+durable+": a pull request", func() error {
		cons, err := js.Consumer(ctx, stream, durable)
		if err != nil {
			t.Fatal(err)
		}
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumWaiting == 0 {
			return errors.New("none waiting")
		}
		return nil
	})
}
