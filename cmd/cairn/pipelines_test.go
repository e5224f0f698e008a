package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/internal/night"
	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/assets"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/runner"
)

type constStep string

func (s constStep) Run(context.Context, *runner.Attempt) (*runner.Result, error) {
	return &runner.Result{Output: json.RawMessage(`"` + s + `"`), Items: 1}, nil
}

// copyPipeline is pipeline copy, two steps that read and sum nothing, on the run's input
// members.
func copyPipeline(t *testing.T, js jetstream.JetStream, input ...string) app.Config {
	return app.Config{JS: js, KeysDir: t.TempDir(), Lease: 3 * time.Second, Heartbeat: time.Second,
		Pipeline: pipeline.Definition{Name: "copy", Input: input, Steps: []pipeline.Step{
			{Name: "read", Kind: pipeline.SourceRead, Recovery: "cheap to repeat"},
			{Name: "sum", Kind: pipeline.Compute, Recovery: "recomputed"},
		}},
		Steps: map[string]runner.Step{"read": constStep("rows"), "sum": constStep("total")},
	}
}

// cairn init makes the assets of every registered pipeline as well as the night's, and
// cairn runs lists every pipeline's runs, or one pipeline's with --pipeline.
func TestInitAndRunsOfRegisteredPipelines(t *testing.T) {
	faultmapEnv(t)
	js := natstest.JetStream(t)
	t.Setenv("CAIRN_NATS_URL", js.Conn().ConnectedUrl())
	t.Setenv("CAIRN_DATA_DIR", t.TempDir())
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cfg := copyPipeline(t, js, "source")
	if err := app.Init(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	audit := assets.MustSpace("copy").Stream(assets.StreamAudit)
	if err := js.DeleteStream(ctx, audit); err != nil {
		t.Fatal(err)
	}
	if err := cmdInit(ctx, nil); err != nil {
		t.Fatalf("cairn init: %v", err)
	}
	if _, err := js.Stream(ctx, audit); err != nil {
		t.Errorf("after cairn init, pipeline copy's %s: %v", audit, err)
	}
	if _, err := js.Stream(ctx, assets.StreamRuns); err != nil {
		t.Errorf("after cairn init, the night's %s: %v", assets.StreamRuns, err)
	}

	running, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- app.Run(running, cfg) }()
	if err := app.Start(ctx, js, "copy", "r-1", map[string]any{"source": "a.csv"}); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Wait(ctx, js, "copy", "r-1"); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	for _, args := range [][]string{{"--json"}, {"--json", "--pipeline", "copy"}} {
		rows := runsJSON(t, args...)
		if len(rows) != 1 || rows[0].Pipeline != "copy" || rows[0].RunID != "r-1" || rows[0].Status != string(kc.Done) || rows[0].Steps != 2 {
			t.Errorf("cairn runs %v: %+v, want copy's r-1, done after 2 steps", args, rows)
		}
	}
	if rows := runsJSON(t, "--json", "--pipeline", night.Pipeline.Name); len(rows) != 0 {
		t.Errorf("the night's runs: %+v, want none", rows)
	}
	if err := runRuns(ctx, &bytes.Buffer{}, []string{"--pipeline", "nope"}); !errors.Is(err, errUsage) {
		t.Errorf("an unregistered pipeline: %v, want a usage error", err)
	}

	// cairn faultmap --pipeline times each step by the pipeline's recent runs.
	var fm bytes.Buffer
	if err := runFaultmapCtx(ctx, &fm, []string{"--pipeline", "copy", "--json"}); err != nil {
		t.Fatalf("faultmap --pipeline copy: %v", err)
	}
	var m struct {
		RunsRead int `json:"runs_read"`
		Steps    []struct {
			Name     string `json:"name"`
			Observed *struct {
				Runs  int   `json:"runs"`
				MaxMS int64 `json:"max_ms"`
			} `json:"observed"`
		} `json:"steps"`
	}
	if err := json.Unmarshal(fm.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if m.RunsRead != 1 || len(m.Steps) != 2 || m.Steps[0].Observed == nil || m.Steps[1].Observed == nil || m.Steps[1].Observed.Runs != 1 {
		t.Errorf("faultmap --pipeline copy read %d runs, steps %+v; want 1 run timing both steps", m.RunsRead, m.Steps)
	}
	fm.Reset()
	if err := runFaultmapCtx(ctx, &fm, []string{"--pipeline", "copy", "--runs", "0", "--json"}); err != nil || bytes.Contains(fm.Bytes(), []byte(`"runs_read": 1`)) {
		t.Errorf("faultmap --runs 0 (%v) read runs:\n%s", err, fm.String())
	}

	// status and timeline find the run in its pipeline's space, and not in the night's.
	for _, cmd := range []func(context.Context, []string) error{cmdStatus, cmdTimeline} {
		if err := cmd(ctx, []string{"--pipeline", "copy", "r-1"}); err != nil {
			t.Errorf("status/timeline --pipeline copy r-1: %v", err)
		}
		if err := cmd(ctx, []string{"r-1"}); err == nil {
			t.Error("status/timeline r-1 found copy's run among the night's")
		}
	}

	// A command finds the run in its pipeline's space: cancel refuses copy's r-1 because it
	// is done, and the night has no r-1.
	if err := cmdCancel(ctx, []string{"--pipeline", "copy", "r-1"}); err == nil || strings.Contains(err.Error(), "no run") {
		t.Errorf("cancel --pipeline copy r-1: %v, want a refusal of a done run", err)
	}
	if err := cmdCancel(ctx, []string{"r-1"}); err == nil || !strings.Contains(err.Error(), `no run "r-1"`) {
		t.Errorf("cancel r-1 (the night's): %v, want no such run", err)
	}

	// cairn permissions prints the pipeline's own allow lists (pkg/app's
	// TestPipelinePermissions runs a pipeline under them).
	var out bytes.Buffer
	if err := runPermissions(ctx, &out, []string{"--pipeline", "copy", "--json"}); err != nil {
		t.Fatal(err)
	}
	var got assets.Permissions
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := cfg.Assets().Permissions()
	if !slices.Equal(got.Publish, want.Publish) || !slices.Equal(got.Subscribe, want.Subscribe) || !slices.Equal(got.PublishDeny, want.PublishDeny) || !slices.Contains(got.Publish, "cairn.copy.>") {
		t.Errorf("cairn permissions --pipeline copy: %+v, want %+v", got, want)
	}
	out.Reset()
	if err := runPermissions(ctx, &out, []string{"--pipeline", "copy"}); err != nil || !bytes.Contains(out.Bytes(), []byte(`"$KV.cairn-copy-runs.>"`)) ||
		!bytes.Contains(out.Bytes(), []byte(`"$JS.API.CONSUMER.DELETE.CAIRN_COPY_OUTBOX.outbox-sender"`)) {
		t.Errorf("cairn permissions, as conf (%v):\n%s", err, out.String())
	}
	if err := runPermissions(ctx, &out, nil); !errors.Is(err, errUsage) {
		t.Errorf("no --pipeline: %v, want a usage error", err)
	}
}

func runsJSON(t *testing.T, args ...string) []runRow {
	t.Helper()
	var out bytes.Buffer
	if err := runRuns(t.Context(), &out, args); err != nil {
		t.Fatalf("cairn runs %v: %v", args, err)
	}
	var rows []runRow
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var r runRow
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		rows = append(rows, r)
	}
	return rows
}
