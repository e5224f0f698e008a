package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cairnhq/cairn/internal/apptest"
	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/pkg/app"
)

// cairn start --pipeline starts a registered pipeline's run on its own input; the same input
// started again under another run id is refused naming the first run (exit 1), and the same
// start of the run itself is one run. cairn status shows the run's own input, and cairn
// rejected lists the refusal.
func TestStartPipelineTwice(t *testing.T) {
	faultmapEnv(t)
	js := natstest.JetStream(t)
	t.Setenv("CAIRN_NATS_URL", js.Conn().ConnectedUrl())
	t.Setenv("CAIRN_DATA_DIR", t.TempDir())
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	defer apptest.Host(ctx, t, copyPipeline(t, js, "source", "limit"))()

	var out bytes.Buffer
	first := []string{"--pipeline", "copy", "--input", "source=a.csv", "--json", `{"limit": 10}`}
	if err := runStart(ctx, &out, append(first, "--run-id", "r-1", "--wait")); err != nil || !strings.Contains(out.String(), "started r-1") {
		t.Fatalf("cairn start --pipeline copy --run-id r-1 --wait: %v\n%s", err, out.String())
	}

	out.Reset()
	err := runStart(ctx, &out, append(first, "--run-id", "r-2"))
	var refused *app.Refused
	if !errors.As(err, &refused) || refused.Holder != "r-1" || exitOf(err) != 1 || !strings.Contains(err.Error(), "run r-1 has this input already") {
		t.Fatalf("the same input as r-2: %v (exit %d), want a refusal naming r-1, exit 1", err, exitOf(err))
	}

	out.Reset()
	if err := runStart(ctx, &out, append(first, "--run-id", "r-1")); err != nil || !strings.Contains(out.String(), "run r-1 exists already (done)") {
		t.Errorf("the same start of r-1 again: %v\n%s", err, out.String())
	}

	out.Reset()
	if err := runStatus(ctx, &out, []string{"--pipeline", "copy", "r-1"}); err != nil || !strings.Contains(out.String(), "params     source a.csv, limit 10, shadow false\n") {
		t.Errorf("cairn status --pipeline copy r-1 (%v) does not show the run's input:\n%s", err, out.String())
	}

	out.Reset()
	if err := runRejected(ctx, &out, []string{"--pipeline", "copy", "--json"}); err != nil {
		t.Fatal(err)
	}
	var rows []rejectedRow
	for sc := bufio.NewScanner(&out); sc.Scan(); {
		var r rejectedRow
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r)
	}
	if len(rows) != 1 || rows[0].RunID != "r-2" || rows[0].Subject != "cairn.copy.runs.start" || !strings.Contains(rows[0].Reason, "run r-1 has this input already") || rows[0].At.IsZero() {
		t.Errorf("cairn rejected --pipeline copy: %+v, want r-2's refused start", rows)
	}
	out.Reset()
	if err := runRejected(ctx, &out, []string{"--pipeline", "copy", "--run", "r-1"}); err != nil || !strings.Contains(out.String(), "no refusals") {
		t.Errorf("cairn rejected --run r-1 (%v):\n%s", err, out.String())
	}

	for _, args := range [][]string{
		{"--pipeline", "copy", "--warehouse", "ldh"},
		{"--pipeline", "copy", "--input", "source=a.csv", "--json", `{"source": "b.csv"}`},
		{"--pipeline", "copy", "--json", `["a.csv"]`},
		{"--pipeline", "copy", "--json", `{"run_id": "r-9"}`},
		{"--warehouse", "ldh", "--date", "2026-10-13", "--input", "source=a.csv"},
	} {
		if err := runStart(ctx, &out, args); !errors.Is(err, errUsage) {
			t.Errorf("cairn start %v: %v, want a usage error", args, err)
		}
	}
}
