package e2e

import (
	"context"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/faults"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// A worker never goes idle silently. post-ledger's durable is deleted under its running
// service while it holds the step (stalled at entry 24): its /readyz turns 503 naming the
// loop while the step in hand has its grace, then the process exits 1 by itself. After
// `cairn init` puts the durable back, a new post-ledger finishes the night, equal to its
// truth.
func TestServicesExitWhenTheirDurableIsDeleted(t *testing.T) {
	t.Parallel() // mostly waiting (a stall, an outage, a grace): see TestMain
	h := newProcsNight(t)
	h.svcs(allBut("post-ledger"))
	// Two at once, so the loop pulls on while the step is in hand; the grace is the window
	// in which the process is up but unready.
	p := h.svc("post-ledger", "CAIRN_FAULTS="+stallAt24, "CAIRN_STEP_CONCURRENCY=2", "CAIRN_STOP_GRACE=20s")
	readyz := "http://" + h.metricsAddr(p) + "/readyz"
	var code int
	var body string
	if !poll(time.Minute, func() bool {
		code, body = getReadyz(readyz)
		return code == http.StatusOK
	}) {
		t.Fatalf("/readyz of a running post-ledger: %d %q, want 200 within a minute", code, body)
	}
	h.startRun()
	h.waitFired(stallAt24, runLimit)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := h.js.DeleteConsumer(ctx, assets.StreamSteps, "post-ledger"); err != nil {
		t.Fatal(err)
	}
	if !poll(time.Minute, func() bool {
		code, body = getReadyz(readyz)
		return code == http.StatusServiceUnavailable
	}) {
		t.Fatalf("/readyz after the durable was deleted: %d %q, want 503 within a minute", code, body)
	}
	if !strings.Contains(body, "service post-ledger stopped") || !strings.Contains(body, `consumer "post-ledger"`) {
		t.Fatalf("/readyz: %q, want the reason naming the service and its durable", body)
	}
	exit, err := p.Wait(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if exit != 1 {
		t.Fatalf("post-ledger exited %d after its durable was deleted, want 1", exit)
	}

	cmd := exec.CommandContext(ctx, cairnBin, "init")
	cmd.Env = h.env()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cairn init: %v\n%s", err, out)
	}
	h.svc("post-ledger")
	h.waitStatus(runLimit, kc.Done)
	h.assertTruth()
}

// The same under `cairn dev`, for the compensator's durable: deleted while post-ledger
// holds its step, the process turns unready naming the compensator, stops the rest (the
// step in hand has its grace) and exits 1. `cairn dev` again puts the durable back and
// finishes the night, equal to its truth.
func TestDevExitsWhenTheCompensatorsDurableIsDeleted(t *testing.T) {
	t.Parallel() // mostly waiting (a stall, an outage, a grace): see TestMain
	n := newNight(t, 0)
	n.start("CAIRN_FAULTS="+stallAt24, "CAIRN_STOP_GRACE=20s", anyPort)
	readyz := "http://" + n.metricsAddr() + "/readyz"
	var code int
	var body string
	if !poll(time.Minute, func() bool {
		code, body = getReadyz(readyz)
		return code == http.StatusOK
	}) {
		t.Fatalf("/readyz of cairn dev: %d %q, want 200 within a minute", code, body)
	}
	n.startRun()
	if !poll(runLimit, func() bool { return faults.Fired(filepath.Join(n.dir, "faults"), stallAt24) }) {
		t.Fatalf("fault %s did not fire within %s", stallAt24, runLimit)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := n.js.DeleteConsumer(ctx, assets.StreamRuns, assets.ConsumerCompensator); err != nil {
		t.Fatal(err)
	}
	if !poll(time.Minute, func() bool {
		code, body = getReadyz(readyz)
		return code == http.StatusServiceUnavailable
	}) {
		t.Fatalf("/readyz after the durable was deleted: %d %q, want 503 within a minute", code, body)
	}
	if !strings.Contains(body, "service compensator stopped") || !strings.Contains(body, `consumer "compensator"`) {
		t.Fatalf("/readyz: %q, want the reason naming the compensator and its durable", body)
	}
	exit, err := n.dev.Wait(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if exit != 1 {
		t.Fatalf("cairn dev exited %d after the compensator's durable was deleted, want 1", exit)
	}

	n.start()
	n.waitStatus(runLimit, kc.Done)
	n.assertTruth()
}

// getReadyz asks a /readyz; code 0 when the process does not answer.
func getReadyz(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
