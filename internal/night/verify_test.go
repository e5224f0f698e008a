package night

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/books"
	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/internal/recon"
	"github.com/cairnhq/cairn/internal/stepevent"
	"github.com/cairnhq/cairn/pkg/artifacts"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
)

const (
	testWarehouse = "ldh"
	testDate      = "2026-10-13"
)

// nightFixture is a small night (30 invoices, 2 of them unreadable) on an embedded
// nats-server and SQLite books, its steps run in this process.
type nightFixture struct {
	js        jetstream.JetStream
	store     *kc.Store
	artifacts *artifacts.Store
	handovers jetstream.KeyValue
	env       *Env
}

func newNightFixture(t *testing.T) *nightFixture {
	t.Helper()
	ctx := t.Context()
	js := natstest.JetStream(t)
	if err := assets.Ensure(ctx, js, assets.Config{Steps: Pipeline.Names()}); err != nil {
		t.Fatal(err)
	}
	f := &nightFixture{js: js}
	var err error
	if f.store, err = kc.Open(ctx, js, assets.BucketRuns); err != nil {
		t.Fatal(err)
	}
	if f.artifacts, err = artifacts.Open(ctx, js, assets.ObjectArtifacts); err != nil {
		t.Fatal(err)
	}
	kv := map[string]jetstream.KeyValue{}
	for _, b := range []string{assets.BucketHandovers, assets.BucketMemo, assets.BucketOutbox} {
		if kv[b], err = js.KeyValue(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	f.handovers = kv[assets.BucketHandovers]
	dir := t.TempDir()
	if _, err := recon.Generate(ctx, recon.GenConfig{Warehouse: testWarehouse, Date: testDate, Invoices: 28, Mismatches: 6,
		Unreadable: 2, Seed: 1, InboxDir: filepath.Join(dir, "inbox"), ERPPath: filepath.Join(dir, "erp.db"),
		TruthDir: filepath.Join(dir, "truth")}); err != nil {
		t.Fatal(err)
	}
	ledger, err := books.Open(ctx, "sqlite:"+filepath.Join(dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ledger.Close() })
	erp, err := books.Open(ctx, "sqlite:"+filepath.Join(dir, "erp.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { erp.Close() })
	f.env = &Env{InboxDir: filepath.Join(dir, "inbox"), Ledger: ledger, ERP: erp, Memo: kv[assets.BucketMemo],
		Marks: kv[assets.BucketOutbox], Extractor: recon.RuleExtractor{}, MailFrom: "cairn@cairn.local", FinanceTo: "finance@cairn.local"}
	return f
}

// run starts a runner for each of the steps named, with impl's implementation where it has
// one, until the test ends. Steps not named have no runner: their events stay on the stream.
func (f *nightFixture) run(t *testing.T, steps []string, impl map[string]runner.Step) {
	t.Helper()
	for _, name := range steps {
		step := f.env.Steps()[name]
		if s, ok := impl[name]; ok {
			step = s
		}
		r, err := runner.New(runner.Config{JS: f.js, Store: f.store, Artifacts: f.artifacts, Handovers: f.handovers,
			Pipeline: Pipeline, StepName: name, Step: step})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("runner %s: %v", name, err)
			}
		})
	}
}

// start creates the run's record and publishes fetch's event.
func (f *nightFixture) start(t *testing.T, runID string) {
	t.Helper()
	ctx := t.Context()
	rev, err := f.store.Create(ctx, kc.New(runID, kc.StringParams(false, "warehouse", testWarehouse, "date", testDate), Pipeline.Names(), "2026-10-13T22:00:00Z"))
	if err != nil {
		t.Fatal(err)
	}
	if err := stepevent.Publish(ctx, f.js, assets.Default, "/cairn/test", runID, Fetch, 0, rev, time.Now()); err != nil {
		t.Fatal(err)
	}
}

// approve approves what the waiting run asks, as the supervisor applies a signed approve
// (the fixture runs no supervisor), and sends its step's event again.
func (f *nightFixture) approve(t *testing.T, runID string) {
	t.Helper()
	ctx := t.Context()
	rec, rev, err := f.store.Mutate(ctx, runID, func(r *kc.Record) error {
		if r.Status != kc.WaitingApproval || r.Approval == nil {
			return fmt.Errorf("run %s is %s, not waiting for approval", runID, r.Status)
		}
		by, at := "test", time.Now().UTC().Format(time.RFC3339Nano)
		r.Approval.By, r.Approval.At = &by, &at
		r.Status = kc.Running
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := stepevent.Publish(ctx, f.js, assets.Default, "/cairn/test", runID, rec.Approval.Step, rec.Generation, rev, time.Now()); err != nil {
		t.Fatal(err)
	}
}

// wait watches the run's record until ok says so, within five minutes.
func (f *nightFixture) wait(t *testing.T, runID string, ok func(*kc.Record) bool) *kc.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	w, err := f.store.KV().Watch(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	var last *kc.Record
	for e := range w.Updates() {
		if e == nil {
			continue
		}
		if last, err = kc.Decode(e.Value()); err != nil {
			t.Fatal(err)
		}
		if ok(last) {
			return last
		}
	}
	t.Fatalf("run %s: condition not met within five minutes; last record %+v", runID, last)
	return nil
}

// tampered changes what its step saved after the step's Run and before the runner stores
// the output and calls Verify.
type tampered struct {
	runner.Step
	tamper func(ctx context.Context, a *runner.Attempt, r *runner.Result) error
}

func (s tampered) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	r, err := s.Step.Run(ctx, a)
	if err != nil {
		return nil, err
	}
	return r, s.tamper(ctx, a, r)
}

func (s tampered) Verify(ctx context.Context, a *runner.Attempt, r *runner.Result) error {
	if v, ok := s.Step.(runner.Verifier); ok {
		return v.Verify(ctx, a, r)
	}
	return nil
}

// tamperedChecked is tampered for a step that checks the source: the runner holds a step's
// implementation to its definition (ChecksSource).
type tamperedChecked struct{ tampered }

func (s tamperedChecked) CheckSource(ctx context.Context, a *runner.Attempt, fingerprint string) ([]string, error) {
	return s.Step.(runner.SourceChecker).CheckSource(ctx, a, fingerprint)
}

// tamper wraps step so that tamper changes what it saved.
func tamper(step runner.Step, fn func(ctx context.Context, a *runner.Attempt, r *runner.Result) error) runner.Step {
	t := tampered{step, fn}
	if _, ok := step.(runner.SourceChecker); ok {
		return tamperedChecked{t}
	}
	return t
}

// edit decodes the JSON b holds into v, lets change alter it, and encodes it as the step's
// output again (its lists in parts when large, as Run writes them).
func edit[T any](ctx context.Context, a *runner.Attempt, b *json.RawMessage, change func(*T) error) error {
	var v T
	if err := unmarshal(ctx, a, *b, &v); err != nil {
		return err
	}
	if err := change(&v); err != nil {
		return err
	}
	out, err := output(ctx, a, v)
	*b = out
	return err
}

// TestNightPassesItsVerifications: the night, two unreadable invoices parked, goes through
// every step's verification to finishing, approved before debit-notes (its evidence is
// unclear: two invoices parked).
func TestNightPassesItsVerifications(t *testing.T) {
	f := newNightFixture(t)
	f.run(t, Pipeline.Names(), nil)
	const run = "run-verified"
	f.start(t, run)
	rec := f.wait(t, run, func(r *kc.Record) bool { return r.Status != kc.Running })
	if rec.Status != kc.WaitingApproval || !strings.Contains(rec.NextAction, "2 items parked at extract") {
		t.Fatalf("run is %s (next action %q), want waiting before debit-notes for the 2 parked invoices", rec.Status, rec.NextAction)
	}
	f.approve(t, run)
	rec = f.wait(t, run, func(r *kc.Record) bool { return r.Status != kc.Running })
	if rec.Status != kc.Finishing {
		t.Fatalf("run is %s (handover %v, next action %q), want finishing", rec.Status, rec.Handover, rec.NextAction)
	}
	for _, name := range Pipeline.Names() {
		if s := rec.Step(name); s.Status != kc.Verified {
			t.Errorf("step %s is %s (last error %v), want verified", name, s.Status, s.LastError)
		}
	}
	if n := rec.Step(Extract).ParkedCount; n != 2 {
		t.Errorf("extract parked %d invoices, want the 2 unreadable ones", n)
	}
}

// TestAFailedVerificationHandsTheRunOver: for each step that verifies what it saved, a
// change to what it saved between its Run and its verification hands the run over naming
// what did not hold, in the step's last error and the handover note: the step is failed,
// not verified, no output recorded, and no later step got its event.
func TestAFailedVerificationHandsTheRunOver(t *testing.T) {
	const zeros = "sha256:0000000000000000000000000000000000000000000000000000000000000000"
	cases := []struct {
		name, step string
		// tamper changes what the step saved and returns what the note must name.
		tamper func(ctx context.Context, f *nightFixture, a *runner.Attempt, r *runner.Result) ([]string, error)
	}{
		{"fetch lists a document with another digest", Fetch, func(ctx context.Context, _ *nightFixture, a *runner.Attempt, r *runner.Result) ([]string, error) {
			var want []string
			return want, edit(ctx, a, &r.Output, func(out *fetchOutput) error {
				d := &out.Documents[3]
				want = []string{d.InvoiceNo, d.Digest, zeros}
				d.Digest = zeros
				return nil
			})
		}},
		{"fetch leaves a document out", Fetch, func(ctx context.Context, _ *nightFixture, a *runner.Attempt, r *runner.Result) ([]string, error) {
			var want []string
			return want, edit(ctx, a, &r.Output, func(out *fetchOutput) error {
				d := out.Documents[5]
				want = []string{d.InvoiceNo, d.Digest, "29 listed, 30 in the inbox"}
				out.Documents = slices.Delete(out.Documents, 5, 6)
				return nil
			})
		}},
		{"extract's memo loses an answer", Extract, func(ctx context.Context, f *nightFixture, a *runner.Attempt, _ *runner.Result) ([]string, error) {
			var in fetchOutput
			if err := input(ctx, a, Fetch, &in); err != nil {
				return nil, err
			}
			d := in.Documents[7]
			key := memoKey(a.RunID, d.Digest, f.env.Extractor.Versions())
			if _, err := f.env.Memo.Get(ctx, key); err != nil {
				return nil, fmt.Errorf("the answer of %s is not memoised under %s: %w", d.InvoiceNo, key, err)
			}
			return []string{d.InvoiceNo, key}, f.env.Memo.Delete(ctx, key)
		}},
		{"extract saves other lines than the memoised answer", Extract, func(ctx context.Context, _ *nightFixture, a *runner.Attempt, r *runner.Result) ([]string, error) {
			var want []string
			return want, edit(ctx, a, &r.Output, func(out *extractOutput) error {
				inv := &out.Invoices[2]
				want = []string{inv.InvoiceNo, "memoised answer reads as sha256:"}
				inv.Lines[0].Qty++
				return nil
			})
		}},
		{"match lists a line twice", Match, func(ctx context.Context, _ *nightFixture, a *runner.Attempt, r *runner.Result) ([]string, error) {
			var want []string
			return want, edit(ctx, a, &r.Output, func(out *matchOutput) error {
				m := out.Matches[4]
				want = []string{fmt.Sprintf("line %s:%d is matched, and matched again", m.InvoiceNo, m.Line)}
				out.Matches = append(out.Matches, m)
				return nil
			})
		}},
		{"match loses a line", Match, func(ctx context.Context, _ *nightFixture, a *runner.Attempt, r *runner.Result) ([]string, error) {
			var want []string
			return want, edit(ctx, a, &r.Output, func(out *matchOutput) error {
				m := out.Matches[9]
				want = []string{fmt.Sprintf("line %s:%d is neither matched nor parked", m.InvoiceNo, m.Line)}
				out.Matches = slices.Delete(out.Matches, 9, 10)
				return nil
			})
		}},
		{"compare's saved snapshot has another receipt", Compare, func(ctx context.Context, _ *nightFixture, a *runner.Attempt, r *runner.Result) ([]string, error) {
			var ms matchOutput
			if err := input(ctx, a, Match, &ms); err != nil {
				return nil, err
			}
			m := ms.Matches[0]
			var want []string
			return want, edit(ctx, a, &r.Snapshot, func(snap *snapshot) error {
				i := slices.IndexFunc(snap.Receipts, func(x recon.Receipt) bool { return x.PO == m.PO && x.Line == m.POLine })
				if i < 0 {
					return errors.New("no receipt for the first match")
				}
				snap.Receipts[i].Qty = 0 // the line now recomputes as billed over nothing received
				want = []string{fmt.Sprintf("recomputed from the saved snapshot and the matches %s:%d:qty", m.InvoiceNo, m.Line)}
				return nil
			})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newNightFixture(t)
			named := make(chan []string, 1)
			change := func(ctx context.Context, a *runner.Attempt, r *runner.Result) error {
				want, err := tc.tamper(ctx, f, a, r)
				select {
				case named <- want:
				default: // a second attempt tampers as the first did
				}
				return err
			}
			steps := Pipeline.Names()
			at := slices.Index(steps, tc.step)
			f.run(t, steps[:at+1], map[string]runner.Step{tc.step: tamper(f.env.Steps()[tc.step], change)})
			const run = "run-tampered"
			f.start(t, run)
			rec := f.wait(t, run, func(r *kc.Record) bool { return r.Status != kc.Running || r.Step(tc.step).Status == kc.Verified })

			var want []string
			select {
			case want = <-named:
			default:
				t.Fatalf("step %s never ran", tc.step)
			}
			if rec.Status != kc.HandedOver {
				t.Fatalf("run is %s, step %s %s; want the run handed over", rec.Status, tc.step, rec.Step(tc.step).Status)
			}
			s := rec.Step(tc.step)
			if s.Status != kc.Failed || s.Output != nil || s.FinishedAt != nil {
				t.Errorf("step %s: status %s, output %v, finished %v; want failed with nothing recorded", tc.step, s.Status, s.Output, s.FinishedAt)
			}
			last := ""
			if s.LastError != nil {
				last = *s.LastError
			}
			for _, w := range append([]string{runner.ErrVerify.Error()}, want...) {
				if !strings.Contains(last, w) {
					t.Errorf("last error %q does not name %q", last, w)
				}
			}
			for _, later := range steps[at+1:] {
				if ls := rec.Step(later); ls.Status != kc.Pending || ls.StartedAt != nil {
					t.Errorf("later step %s is %s (started %v), want pending, never started", later, ls.Status, ls.StartedAt)
				}
			}
			e, err := f.handovers.Get(t.Context(), run)
			if err != nil {
				t.Fatalf("handover note: %v", err)
			}
			var note runner.HandoverNote
			if err := json.Unmarshal(e.Value(), &note); err != nil {
				t.Fatal(err)
			}
			if rec.Handover == nil || note.ID != *rec.Handover || note.Step != tc.step {
				t.Errorf("note %s of step %s, record names %v; want the note of %s", note.ID, note.Step, rec.Handover, tc.step)
			}
			for _, w := range want {
				if !strings.Contains(note.Error, w) {
					t.Errorf("note %q does not name %q", note.Error, w)
				}
			}
			// The next step has no runner: an event for it would still be on the stream.
			stream, err := f.js.Stream(t.Context(), assets.StreamSteps)
			if err != nil {
				t.Fatal(err)
			}
			next := steps[at+1]
			if m, err := stream.GetLastMsgForSubject(t.Context(), events.StepSubject(next, run)); !errors.Is(err, jetstream.ErrMsgNotFound) {
				t.Errorf("step %s got an event (%v, %v)", next, m, err)
			}
		})
	}
}
