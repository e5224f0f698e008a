package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/eventually"
	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/identity"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/runner"
)

// plannedStep says what it will do before it does it (its plan is the run's items), so that
// it can wait for an approval of that plan; it counts its runs.
type plannedStep struct{ runs atomic.Int32 }

func (p *plannedStep) Plan(_ context.Context, a *runner.Attempt) ([]byte, error) {
	return []byte(a.Params.String("items")), nil
}

func (p *plannedStep) Run(_ context.Context, a *runner.Attempt) (*runner.Result, error) {
	p.runs.Add(1)
	return &runner.Result{Output: []byte(`"sent"`), Items: 1}, nil
}

// waitStatus watches run's record until its status is want; the test fails at ctx's end.
func waitStatus(ctx context.Context, t *testing.T, store *kc.Store, run string, want kc.Status) {
	t.Helper()
	w, err := store.KV().Watch(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			t.Fatalf("run %s is not %s within the test's time", run, want)
		case e := <-w.Updates():
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			r, err := store.DecodeEntry(ctx, run, e.Value(), e.Revision())
			if err != nil {
				t.Fatal(err)
			}
			if r.Status == want {
				return
			}
		}
	}
}

// A hosted pipeline's approval gate, driven by the operator's commands: cairn approver add
// --pipeline registers the approver in the pipeline's keys bucket (not the night's), an
// approve signed by a name nobody registered is refused and the run keeps waiting, the
// registered approver's signed approve lets the step run once and the run finish, and
// cairn reject of a run that waits for nothing exits 1 saying so, of a waiting one is taken.
func TestApprovePipeline(t *testing.T) {
	faultmapEnv(t)
	js := natstest.JetStream(t)
	t.Setenv("CAIRN_NATS_URL", js.Conn().ConnectedUrl())
	t.Setenv("CAIRN_DATA_DIR", t.TempDir())
	t.Setenv("CAIRN_APPROVER_SEED_FILE", "")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	send := &plannedStep{}
	cfg := app.Config{JS: js, KeysDir: t.TempDir(), Lease: 3 * time.Second, Heartbeat: time.Second,
		Pipeline: pipeline.Definition{Name: "gate", Input: []string{"items"}, Steps: []pipeline.Step{
			{Name: "items", Kind: pipeline.SourceRead, Recovery: "read again"},
			{Name: "send", Kind: pipeline.Compute, Leased: true, Recovery: "computed again"},
		}},
		Steps:         map[string]runner.Step{"items": constStep("rows"), "send": send},
		ApprovalSteps: []string{"send"}, ApprovalTimeout: time.Hour,
	}
	if err := app.Init(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// The night's assets too, so that an approver of the night has a bucket to go to.
	if err := cmdInit(ctx, nil); err != nil {
		t.Fatalf("cairn init: %v", err)
	}
	running, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(running, cfg) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	sp := assets.MustSpace("gate")
	store, err := kc.Open(ctx, js, sp.Bucket(assets.BucketRuns))
	if err != nil {
		t.Fatal(err)
	}
	for run, items := range map[string]string{"r-1": "a,b", "r-2": "c"} {
		if err := app.Start(ctx, js, "gate", run, map[string]any{"items": items}); err != nil {
			t.Fatal(err)
		}
	}
	waitStatus(ctx, t, store, "r-1", kc.WaitingApproval)
	waitStatus(ctx, t, store, "r-2", kc.WaitingApproval)

	dir := t.TempDir()
	cfo := filepath.Join(dir, "cfo.seed")
	if err := cmdApprover(ctx, []string{"add", "cfo", "--new-seed", cfo, "--pipeline", "gate"}); err != nil {
		t.Fatalf("cairn approver add cfo --pipeline gate: %v", err)
	}
	if !hasApprover(ctx, t, js, sp.Bucket(identity.Bucket), "cfo") || hasApprover(ctx, t, js, assets.BucketKeys, "cfo") {
		t.Error("cairn approver add --pipeline gate: cfo is not in gate's keys alone")
	}
	// Without --pipeline, as before: the night's keys bucket.
	if err := cmdApprover(ctx, []string{"add", "asha", "--new-seed", filepath.Join(dir, "asha.seed")}); err != nil {
		t.Fatalf("cairn approver add asha: %v", err)
	}
	if !hasApprover(ctx, t, js, assets.BucketKeys, "asha") || hasApprover(ctx, t, js, sp.Bucket(identity.Bucket), "asha") {
		t.Error("cairn approver add (the night's): asha is not in the night's keys alone")
	}
	// A pipeline nobody registered is a usage error, and no seed is written for it.
	nope := filepath.Join(dir, "nope.seed")
	if err := cmdApprover(ctx, []string{"add", "cfo", "--new-seed", nope, "--pipeline", "nope"}); !errors.Is(err, errUsage) {
		t.Errorf("cairn approver add --pipeline nope: %v, want a usage error", err)
	}
	if _, err := os.Stat(nope); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cairn approver add --pipeline nope wrote a seed (%v)", err)
	}

	// An approve signed by a name nobody registered in gate's keys (asha is the night's) is
	// refused with the supervisor's reason, and the run keeps waiting.
	err = cmdApprove(ctx, []string{"r-1", "--by", "asha", "--seed", filepath.Join(dir, "asha.seed"), "--pipeline", "gate"})
	if err == nil || exitOf(err) != 1 || !strings.Contains(err.Error(), "approve of r-1 refused") || !strings.Contains(err.Error(), identity.ErrUnknownSigner.Error()) {
		t.Errorf("approve of r-1 by asha, not gate's approver: %v (exit %d), want a refusal naming an unknown signer", err, exitOf(err))
	}
	if r, _, err := store.Load(ctx, "r-1"); err != nil || r.Status != kc.WaitingApproval {
		t.Fatalf("after the refused approve, r-1: %v, %v; want it waiting still", r.Status, err)
	}
	if n := send.runs.Load(); n != 0 {
		t.Fatalf("send ran %d times before its approval", n)
	}

	if err := cmdApprove(ctx, []string{"r-1", "--by", "cfo", "--seed", cfo, "--pipeline", "gate", "--wait"}); err != nil {
		t.Fatalf("cairn approve r-1 --by cfo --pipeline gate --wait: %v", err)
	}
	end, _, err := store.Load(ctx, "r-1")
	if err != nil {
		t.Fatal(err)
	}
	if end.Status != kc.Done || end.Approval == nil || end.Approval.By == nil || *end.Approval.By != "cfo" {
		t.Fatalf("r-1 ended %s with approval %+v, want done, approved by cfo", end.Status, end.Approval)
	}
	if n := send.runs.Load(); n != 1 {
		t.Errorf("send ran %d times, want once", n)
	}

	// r-1 waits for nothing now: reject and approve say so, exit 1, and send nothing.
	for verb, cmd := range map[string]func(context.Context, []string) error{"reject": cmdReject, "approve": cmdApprove} {
		err := cmd(ctx, []string{"r-1", "--pipeline", "gate"})
		if err == nil || exitOf(err) != 1 || !strings.Contains(err.Error(), "run r-1 is done: it waits for no approval") {
			t.Errorf("cairn %s r-1 --pipeline gate of a done run: %v (exit %d), want a refusal, exit 1", verb, err, exitOf(err))
		}
	}
	// The night has no r-2: the run is looked for in the pipeline's bucket alone.
	if err := cmdReject(ctx, []string{"r-2"}); err == nil || !strings.Contains(err.Error(), `no run "r-2"`) {
		t.Errorf("cairn reject r-2 (the night's): %v, want no such run", err)
	}
	if err := cmdReject(ctx, []string{"r-2", "--pipeline", "gate"}); err != nil {
		t.Fatalf("cairn reject r-2 --pipeline gate: %v", err)
	}
	// The reject is in the record when the command returns; the compensator, which a
	// pipeline that may wait for a person runs even with no Systems, then makes the run
	// undone, with nothing to reverse.
	eventually.That(t, time.Minute, "r-2 undone after its reject", func() error {
		r, _, err := store.Load(ctx, "r-2")
		if err != nil {
			return err
		}
		if r.Status != kc.Undone {
			return fmt.Errorf("r-2 after its reject: %+v", r)
		}
		return nil
	})
	if n := send.runs.Load(); n != 1 {
		t.Errorf("send ran %d times after r-2's reject, want once (r-1's)", n)
	}
}

// hasApprover reports whether bucket holds a key for approver name.
func hasApprover(ctx context.Context, t *testing.T, js jetstream.JetStream, bucket, name string) bool {
	t.Helper()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatalf("bucket %s: %v", bucket, err)
	}
	_, err = kv.Get(ctx, "approver."+name)
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatal(err)
	}
	return err == nil
}
