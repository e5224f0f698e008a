package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/internal/service"
	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/faultmap"
	"github.com/cairnhq/cairn/pkg/pipeline"
)

// faultmapEnv sets the settings cairn faultmap reads to their defaults, so that the
// caller's environment does not leak in.
func faultmapEnv(t *testing.T) {
	t.Helper()
	for k, v := range map[string]string{
		"CAIRN_NATS_URL": "nats://127.0.0.1:4222", "CAIRN_MODEL_URL": "", "CAIRN_RETRY_ATTEMPTS": "3",
		"CAIRN_LOOP_GUARD": "3", "CAIRN_MAX_DELIVER": "20", "CAIRN_APPROVAL_STEPS": "", "CAIRN_MODEL_RPS": "5",
	} {
		t.Setenv(k, v)
	}
}

func TestFaultmapExit(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
		args []string
		gaps int // -1: a usage error
		want string
	}{
		{name: "defaults", want: "gaps: none"},
		{name: "production approval", env: map[string]string{"CAIRN_APPROVAL_STEPS": "debit-notes"}, want: "gaps: none"},
		{name: "model rate below the retries' peak", env: map[string]string{"CAIRN_MODEL_RPS": "2"}, gaps: 1, want: "retry-over-rate-limit"},
		{name: "approval of no step", args: []string{"--approval-steps=debit-notes,debit-note"}, gaps: 1,
			want: "would also wait for a person: debit-notes, debit-note"},
		{name: "a stray argument", args: []string{"extract"}, gaps: -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			faultmapEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var out bytes.Buffer
			err := runFaultmap(&out, tt.args)
			switch {
			case tt.gaps < 0:
				if !errors.Is(err, errUsage) {
					t.Fatalf("err %v, want a usage error", err)
				}
				return
			case tt.gaps == 0 && err != nil:
				t.Fatalf("err %v, want none (exit 0)", err)
			case tt.gaps > 0 && (!errors.Is(err, faultmap.ErrGaps) || !strings.Contains(err.Error(), "1 found")):
				t.Fatalf("err %v, want ErrGaps naming 1 gap (exit 1)", err)
			}
			if !strings.Contains(out.String(), tt.want) {
				t.Errorf("output lacks %q:\n%s", tt.want, out.String())
			}
		})
	}
}

func TestFaultmapJSON(t *testing.T) {
	faultmapEnv(t)
	var out bytes.Buffer
	if err := runFaultmap(&out, []string{"--json", "--approval-steps", "debit-notes"}); err != nil {
		t.Fatal(err)
	}
	var m faultmap.Map
	dec := json.NewDecoder(&out)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("decoding the output: %v", err)
	}
	if len(m.Steps) != 8 || m.Gaps == nil || len(m.Gaps) != 0 {
		t.Fatalf("%d steps and gaps %v, want 8 and an empty list", len(m.Steps), m.Gaps)
	}
	for _, s := range m.Steps {
		if s.Approval != (s.Name == "debit-notes") {
			t.Errorf("step %s: approval %t", s.Name, s.Approval)
		}
	}
}

// The faultmap prints the model's limit as the extractor keeps it: shared by every
// instance, from the same definition (service.Config.ModelLimit).
func TestFaultmapSharedLimit(t *testing.T) {
	faultmapEnv(t)
	t.Setenv("CAIRN_MODEL_RPS", "4")
	var out bytes.Buffer
	if err := runFaultmap(&out, nil); err != nil {
		t.Fatal(err)
	}
	cfg, err := service.Load()
	if err != nil {
		t.Fatal(err)
	}
	want := "CAIRN_MODEL_RPS = " + cfg.ModelLimit().String()
	if !strings.Contains(out.String(), want) || !strings.Contains(want, "4 calls per second, burst 1, shared by every instance (KV cairn-limits, key model") {
		t.Errorf("output lacks %q:\n%s", want, out.String())
	}
}

// The fault map finds the steps whose loop guard counts progress as the runner does.
func TestFaultmapProgressSteps(t *testing.T) {
	if got, want := strings.Join(progressSteps(), ","), "extract,post-ledger,update-stock,debit-notes,report"; got != want {
		t.Errorf("progress steps %s, want %s", got, want)
	}
}

// cairn faultmap --pipeline maps a pipeline the CLI was not built with, as its Init
// registered it on CAIRN_NATS_URL; an unregistered name is an error naming the registered.
func TestFaultmapOfARegisteredPipeline(t *testing.T) {
	faultmapEnv(t)
	js := natstest.JetStream(t)
	t.Setenv("CAIRN_NATS_URL", js.Conn().ConnectedUrl())
	def := pipeline.Definition{Name: "copy", Input: []string{"source"}, Steps: []pipeline.Step{
		{Name: "read", Kind: pipeline.SourceRead, Leased: true, Recovery: "cheap to repeat"},
		{Name: "write", Kind: pipeline.BusinessWrite, Leased: true, Fenced: true, Effects: "rows", Key: "<run>:<row>", Recovery: "keyed"},
	}}
	if err := app.Init(t.Context(), app.Config{JS: js, Pipeline: def, KeysDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := runFaultmap(&out, []string{"--pipeline", "copy", "--json"})
	if !errors.Is(err, faultmap.ErrGaps) {
		t.Fatalf("err %v, want the gaps of the write step", err)
	}
	var m faultmap.Map
	if err := json.Unmarshal(out.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	var steps, gaps []string
	for _, s := range m.Steps {
		steps = append(steps, s.Name)
	}
	for _, g := range m.Gaps {
		gaps = append(gaps, g.Step+":"+string(g.Kind))
	}
	if m.Pipeline != "copy" || strings.Join(steps, ",") != "read,write" || !slices.Contains(gaps, "write:no-compensation") {
		t.Errorf("map of %q, steps %v, gaps %v: want copy's read and write, and write's missing compensation", m.Pipeline, steps, gaps)
	}
	if err := runFaultmap(&out, []string{"--pipeline", "nope"}); !errors.Is(err, app.ErrNotRegistered) || !strings.Contains(err.Error(), "[copy]") {
		t.Errorf("an unregistered pipeline: %v, want ErrNotRegistered naming copy", err)
	}
}
