package runner_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/runner"
	"github.com/cairnhq/cairn/pkg/saga"
)

// writing is toy with a first step that writes outside (ledger rows).
var writing = pipeline.Definition{Name: "toy", Steps: []pipeline.Step{
	{Name: "one", Kind: pipeline.BusinessWrite, Leased: true, Effects: "ledger rows", Key: "the row's key"},
	toy.Steps[1], toy.Steps[2],
}}

// fingerprint is the input fingerprint the runner documents: params, then each input read.
//
// The params are spelt in the pipeline's declared order with shadow last: for the toy's
// (warehouse, date), the bytes encoding/json made of the record's params before they were
// the pipeline's own, so a run in flight across the upgrade keeps its fingerprints.
func fingerprint(p kc.Params, outside string, reads ...string) string {
	s := fmt.Sprintf("params {\"warehouse\":%q,\"date\":%q,\"shadow\":%t}\n", p.String("warehouse"), p.String("date"), p.Shadow)
	for i := 0; i < len(reads); i += 2 {
		s += fmt.Sprintf("input %s %s\n", reads[i], reads[i+1])
	}
	if outside != "" {
		s += fmt.Sprintf("outside %s\n", outside)
	}
	h := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(h[:])
}

// Every step records the digest of what it read: its params, the earlier outputs it read in
// order (a second read of one counts once), and what the step says it read from outside.
func TestEveryStepRecordsItsInputFingerprint(t *testing.T) {
	f := setup(t)
	reading := func(name string, inputs ...string) stepFunc {
		return func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
			for _, in := range inputs {
				if _, err := a.Input(ctx, in); err != nil {
					return nil, err
				}
			}
			return &runner.Result{Output: json.RawMessage(`{"step":"` + name + `"}`)}, nil
		}
	}
	f.run(t, f.config("one", stepFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
		return &runner.Result{Output: json.RawMessage(`{"step":"one"}`), InputFingerprint: "sha256:documents"}, nil
	})))
	f.run(t, f.config("two", reading("two", "one")))
	f.run(t, f.config("three", reading("three", "two", "one", "two")))
	f.start(t, "r1")
	rec := f.wait(t, "r1", finishing)
	p := rec.Params
	d := func(step string) string { return rec.Step(step).Output.Digest }
	want := map[string]string{
		"one":   fingerprint(p, "sha256:documents"),
		"two":   fingerprint(p, "", "one", d("one")),
		"three": fingerprint(p, "", "two", d("two"), "one", d("one")),
	}
	for step, w := range want {
		got := rec.Step(step).InputFingerprint
		if got == nil || *got != w {
			t.Errorf("step %s: input_fingerprint %v, want %s", step, got, w)
		}
	}
	if two, three := rec.Step("two").InputFingerprint, rec.Step("three").InputFingerprint; two != nil && three != nil && *two == *three {
		t.Error("two steps that read different inputs have the same fingerprint")
	}
}

// effects.intents_open counts the step's intents without an outcome: a failure records
// those of its attempt, and a later attempt's commit those an earlier attempt left open
// and it did not confirm. A step that writes outside counts them even when it records its
// saga by itself.
func TestIntentsOpenCountsWritesBegunAndNotConfirmed(t *testing.T) {
	f := setup(t)
	rec := func(key, phase string) saga.Record {
		return saga.Record{Key: key, RunID: "r1", Step: "one", Phase: phase, Payload: []byte(`{}`)}
	}
	var calls atomic.Int32
	one := writeFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
		if calls.Add(1) == 1 {
			// k1 written and confirmed, k2 and k3 begun, then the attempt fails.
			for _, r := range []saga.Record{rec("k1", saga.Intent), rec("k1", saga.Outcome), rec("k2", saga.Intent), rec("k3", saga.Intent)} {
				if err := saga.Publish(ctx, f.js, "/cairn/one", time.Now(), r); err != nil {
					return nil, err
				}
			}
			return nil, runner.Temporary(errBoom)
		}
		// The next attempt writes k2 again and confirms it; k3 it never gets to.
		for _, r := range []saga.Record{rec("k2", saga.Intent), rec("k2", saga.Outcome)} {
			if err := a.RecordEffect(ctx, r); err != nil {
				return nil, err
			}
		}
		return &runner.Result{Output: json.RawMessage(`{"step":"one"}`), Effects: &kc.Effects{Keys: 2}}, nil
	})
	c := f.config("one", one)
	c.Pipeline, c.LoopGuard = writing, 3
	f.run(t, c)
	f.run(t, f.config("two", output("two")))
	f.run(t, f.config("three", output("three")))
	f.start(t, "r1")
	failed := f.wait(t, "r1", func(r *kc.Record) bool { return r.Step("one").Attempts == 1 })
	if e := failed.Step("one").Effects; e == nil || e.IntentsOpen != 2 {
		t.Fatalf("after the failed attempt: effects %+v, want 2 intents open (k2, k3)", e)
	}
	done := f.wait(t, "r1", finishing)
	if e := done.Step("one").Effects; e == nil || e.Keys != 2 || e.IntentsOpen != 1 {
		t.Fatalf("at the commit: effects %+v, want 2 keys and 1 intent open (k3)", e)
	}
	if e := done.Step("two").Effects; e != nil {
		t.Errorf("a step without outside writes has effects %+v, want null", e)
	}
}

// A handover records the open intents of the step too: here the one write the step began
// and could not confirm.
func TestHandoverRecordsIntentsOpen(t *testing.T) {
	f := setup(t)
	one := stepFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
		for _, r := range []saga.Record{
			{Key: "k1", RunID: a.RunID, Step: a.Step, Phase: saga.Intent}, {Key: "k1", RunID: a.RunID, Step: a.Step, Phase: saga.Outcome},
			{Key: "k2", RunID: a.RunID, Step: a.Step, Phase: saga.Intent},
		} {
			if err := a.RecordEffect(ctx, r); err != nil {
				return nil, err
			}
		}
		return nil, fmt.Errorf("writing k2: %w", errBoom)
	})
	f.run(t, f.config("one", one))
	f.start(t, "r1")
	got := f.wait(t, "r1", handedOver)
	if e := got.Step("one").Effects; e == nil || e.IntentsOpen != 1 {
		t.Fatalf("handed over: effects %+v, want 1 intent open", e)
	}
}

// A lease-free step whose attempt failed records the versions it ran under; its next attempt,
// under another code version, commits with the change in its last error (as a leased step's
// restart records it) and on the timeline, so a later step that cannot be undone sees it.
func TestLeaseFreeStepRecordsAVersionChange(t *testing.T) {
	f := setup(t)
	failed := make(chan struct{})
	first := stepFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
		select {
		case <-failed:
		default:
			close(failed)
		}
		return nil, runner.Temporary(errors.New("the compute's input went away for now (injected)"))
	})
	f.run(t, f.config("one", output("one")))
	f.run(t, f.config("three", output("three")))
	c := f.config("two", first)
	c.CodeVersion = "v1"
	r1, err := runner.New(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r1.Run(ctx) }()
	f.start(t, "r1")
	rec := f.wait(t, "r1", func(r *kc.Record) bool { return r.Step("two").Attempts == 1 })
	if v := rec.Step("two").Versions.Code; v == nil || *v != "v1" {
		t.Fatalf("the failed attempt recorded code %v, want v1", v)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	c = f.config("two", output("two"))
	c.CodeVersion = "v2"
	f.run(t, c)
	rec = f.wait(t, "r1", finishing)
	two := rec.Step("two")
	if two.LastError == nil || !strings.Contains(*two.LastError, "version change: code v1 → v2") || two.Versions.Code == nil || *two.Versions.Code != "v2" {
		t.Fatalf("two verified with last error %v and code %v, want the change v1 → v2 recorded", two.LastError, two.Versions.Code)
	}
}
