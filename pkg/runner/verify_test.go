package runner_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cairnhq/cairn/pkg/artifacts"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
)

// verified is a step with a large output (an object, not inline) and a Verify.
type verified struct {
	out    []byte
	verify func(ctx context.Context, a *runner.Attempt, r *runner.Result) error
}

func (s verified) Run(context.Context, *runner.Attempt) (*runner.Result, error) {
	return &runner.Result{Output: s.out}, nil
}

func (s verified) Verify(ctx context.Context, a *runner.Attempt, r *runner.Result) error {
	return s.verify(ctx, a, r)
}

func largeOutput(name string) []byte {
	return []byte(fmt.Sprintf(`{"step":%q,"pad":%q}`, name, strings.Repeat("x", 2*artifacts.InlineMax)))
}

// storedFirst checks that the output Verify is handed is in the object store already, under
// its content digest, then fails naming an item.
func (f *fixture) storedFirst(t *testing.T, step string, out []byte) verified {
	return verified{out: out, verify: func(ctx context.Context, a *runner.Attempt, r *runner.Result) error {
		sum := sha256.Sum256(out)
		ptr := &kc.Output{Object: a.RunID + "/" + step + "/" + hex.EncodeToString(sum[:]), Digest: artifacts.Digest(out), Size: int64(len(out))}
		stored, err := f.artifacts.Load(ctx, ptr)
		if err != nil || string(stored) != string(r.Output) {
			t.Errorf("step %s: Verify ran before its output was stored (%v)", step, err)
		}
		return errors.New("item 7: want 3, found 4")
	}}
}

// TestAFailedVerificationHandsOver: for a leased and a lease-free step, Verify is handed the
// output as stored, and its failure hands the run over naming what did not hold; the step is
// failed, nothing of it recorded, and the next step never runs.
func TestAFailedVerificationHandsOver(t *testing.T) {
	for _, step := range []string{"one", "two"} {
		t.Run(step, func(t *testing.T) {
			f := setup(t)
			impl := map[string]runner.Step{"one": output("one"), "two": output("two"), "three": output("three")}
			impl[step] = f.storedFirst(t, step, largeOutput(step))
			for _, s := range toy.Names() {
				f.run(t, f.config(s, impl[s]))
			}
			f.start(t, "r1")
			rec := f.wait(t, "r1", func(r *kc.Record) bool { return r.Status != kc.Running })
			s := rec.Step(step)
			if rec.Status != kc.HandedOver || s.Status != kc.Failed || s.Output != nil || s.FinishedAt != nil {
				t.Fatalf("run %s, step %s %s (output %v); want handed over, the step failed with no output", rec.Status, step, s.Status, s.Output)
			}
			if s.LastError == nil || !strings.Contains(*s.LastError, runner.ErrVerify.Error()) || !strings.Contains(*s.LastError, "item 7: want 3, found 4") {
				t.Errorf("last error %v, want the verification's", s.LastError)
			}
			if next := rec.Step("three"); next.Status != kc.Pending || next.StartedAt != nil {
				t.Errorf("step three is %s (started %v), want never started", next.Status, next.StartedAt)
			}
			e, err := f.handovers.Get(t.Context(), "r1")
			if err != nil {
				t.Fatal(err)
			}
			var note runner.HandoverNote
			if err := json.Unmarshal(e.Value(), &note); err != nil || note.Step != step || !strings.Contains(note.Error, "item 7: want 3, found 4") {
				t.Errorf("note %+v (%v), want step %s's verification", note, err, step)
			}
			if n := count(f.audit(t, "r1"), "step.verified", ""); n != map[string]int{"one": 0, "two": 1}[step] {
				t.Errorf("%d steps verified in the timeline", n)
			}
		})
	}
}

// TestVerifyKeepsTheLease: the heartbeat renews the lease while Verify runs, so that a long
// verification of a big night is not taken for a dead owner.
func TestVerifyKeepsTheLease(t *testing.T) {
	f := setup(t)
	one := verified{out: largeOutput("one"), verify: func(ctx context.Context, a *runner.Attempt, _ *runner.Result) error {
		rec, _, err := f.store.Load(ctx, a.RunID)
		if err != nil || rec.Lease == nil {
			return fmt.Errorf("no lease while verifying (%v)", err)
		}
		was := rec.Lease.WriteID
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		w, err := f.store.KV().Watch(ctx, a.RunID)
		if err != nil {
			return err
		}
		defer func() { _ = w.Stop() }()
		for e := range w.Updates() {
			if e == nil {
				continue
			}
			r, err := kc.Decode(e.Value())
			if err != nil {
				return err
			}
			if r.Lease != nil && r.Lease.WriteID != was {
				return nil
			}
		}
		return fmt.Errorf("the lease was not renewed while Verify ran: %w", ctx.Err())
	}}
	f.runAll(t, one)
	f.start(t, "r1")
	rec := f.wait(t, "r1", func(r *kc.Record) bool { return r.Status != kc.Running })
	if rec.Status != kc.Finishing {
		t.Fatalf("run %s, step one %s (last error %v); want finishing", rec.Status, rec.Step("one").Status, rec.Step("one").LastError)
	}
}
