package kvcheckpoint_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/artifacts"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// Values as long as the writers make them, for a run id of 64 characters.
var (
	longRun   = strings.Repeat("r", 64)
	longStamp = "2026-11-01T22:00:03.123456789+05:30"
)

// commitLong sets step name of r verified, as the runner's longest commit writes it, its
// output and parked list as objects (the artifact store's names), unless inline is given.
func commitLong(r *kc.Record, name string, inline []byte) {
	commitAs(r, name, inline, true)
}

// commitAs is commitLong, or with short is the commit of a step without versions beyond
// the code's, effects or an earlier failure.
func commitAs(r *kc.Record, name string, inline []byte, long bool) {
	s := r.Step(name)
	if !long {
		defer func() {
			s.Attempts, s.Effects, s.InputFingerprint = 0, nil, nil
			s.Versions = kc.Versions{Code: kc.Ptr("v0.1.0")}
			s.Token = kc.Ptr(uint64(1234))
			s.StartedAt, s.FinishedAt = kc.Ptr("2026-11-01T22:00:03.12345Z"), kc.Ptr("2026-11-01T22:00:03.12345Z")
		}()
	}
	s.Status = kc.Verified
	s.Attempts = 3
	s.StartedAt, s.FinishedAt = kc.Ptr(longStamp), kc.Ptr(longStamp)
	object := func() *kc.Output {
		return &kc.Output{Object: r.RunID + "/" + name + "/" + strings.Repeat("a", 64), Digest: "SHA-256=" + strings.Repeat("b", 43) + "=", Size: 123_456_789}
	}
	s.Output = object()
	if inline != nil {
		s.Output = &kc.Output{Inline: inline, Digest: "SHA-256=" + strings.Repeat("b", 43) + "=", Size: int64(len(inline))}
	}
	s.InputFingerprint = kc.Ptr("sha256:" + strings.Repeat("c", 64))
	s.Versions = kc.Versions{Code: kc.Ptr("v0.1.0-rc.12+g1234abcd"), Prompt: kc.Ptr("lines-v1"), Schema: kc.Ptr("line-items-v1"), Model: kc.Ptr("rules-1")}
	s.Token = kc.Ptr(uint64(98_765_432_101))
	s.Effects = &kc.Effects{Keys: 123_456, IntentsOpen: 12}
	s.ParkedCount = 0
	if s.LastError != nil {
		s.LastError = kc.Ptr(kc.CutText(*s.LastError, kc.MaxKeptError))
	}
	r.NextAction = "run step after " + name + " of " + r.RunID
}

// takeLong gives r the lease for step as a worker with a long host name takes it.
func takeLong(r *kc.Record, step string) {
	r.Lease = &kc.Lease{Owner: step + "/" + strings.Repeat("h", 63) + "/4120-AbCdEf", OwnerInbox: "cairn.owner." + step + "." + strings.Repeat("N", 22), Token: 98_765_432_101, Step: step, WriteID: "w-" + strings.Repeat("W", 22)}
	s := r.Step(step)
	s.Status = kc.InProgress
	s.StartedAt = kc.Ptr(longStamp)
	s.Versions.Code = kc.Ptr("v0.1.0-rc.12+g1234abcd")
}

// failLong records the longest failure of step and the handover of the run.
func failLong(r *kc.Record, step string) {
	r.Lease = nil
	r.Status = kc.HandedOver
	s := r.Step(step)
	s.Status = kc.Failed
	s.Attempts++
	s.SetLastError(strings.Repeat("e", 2*kc.MaxLastError))
	r.Handover = kc.Ptr(r.RunID + ":handover:" + step + ":98765432101")
	r.NextAction = fmt.Sprintf("a person decides: cairn resume %[1]s, cairn resume %[1]s --after-fix, or cairn undo %[1]s", r.RunID)
}

// The runner's rule, an output inline only while Room stays ≥ 0, keeps the promise Room
// makes: whatever inline outputs the early steps took, every later step can take its lease,
// commit with its outputs as objects, and fail and be handed over, within MaxSize, giving up
// at most the verified steps' notes of earlier failures (Fit), never the failing step's own
// error; and StepRoom says so before each step.
func TestRoomLeavesEveryLaterStepItsCommitAndAFailure(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 13))
	kept, inlined := 0, 0
	for trial := range 120 {
		runID := []string{"run-2026-11-01-ldh", longRun}[trial%2]
		r := newRecord(runID)
		r.Epoch = testEpoch
		for i := range 1 + trial%16 {
			r.AddRequest(fmt.Sprintf("cli-%022d", i))
		}
		promised := false // the last commit left Room ≥ 0
		for _, name := range pipeline {
			takeLong(r, name)
			if room := kc.StepRoom(r, name); promised && room < 0 {
				t.Fatalf("trial %d: step %s has no room (%d) in a record whose last commit left room", trial, name, room)
			} else if promised {
				kept++
			}
			if trial%3 == 0 { // an earlier try failed: its note stays, cut, on the verified step
				r.Step(name).SetLastError(strings.Repeat("t", kc.MaxLastError))
			}
			long := rng.IntN(2) == 0
			worst := r.Clone()
			commitAs(worst, name, nil, long)
			next := cmpOr(r.Next(name), name)
			failLong(worst, next)
			if err := kc.Fit(worst); err != nil {
				t.Fatalf("trial %d, step %s: its commit and the next step's handover: %v", trial, name, err)
			}
			if e := worst.Step(next).LastError; e == nil || len(*e) != kc.MaxLastError {
				t.Fatalf("trial %d, step %s: the handover of %s lost its error to fit", trial, name, next)
			}
			failed := r.Clone()
			failLong(failed, name)
			if err := kc.Fit(failed); err != nil || len(*failed.Step(name).LastError) != kc.MaxLastError {
				t.Fatalf("trial %d, step %s: its own handover: %v", trial, name, err)
			}
			inline := []byte(`{"n":"` + strings.Repeat("i", rng.IntN(1016)) + `"}`)
			try := r.Clone()
			commitAs(try, name, inline, long)
			try.Lease = nil
			if kc.Room(try) < 0 {
				commitAs(r, name, nil, long)
			} else {
				commitAs(r, name, inline, long)
				inlined++
			}
			r.Lease = nil
			promised = kc.Room(r) >= 0
		}
	}
	// The room a signature takes (sign.go), and an approver's signature the record may yet
	// carry (history.go), leave fewer outputs inline than before.
	if kept < 10 || inlined < 6 {
		t.Errorf("only %d steps started on a promise and %d outputs went inline: the test proves little", kept, inlined)
	}
	t.Logf("%d steps started on a promise, %d outputs inline", kept, inlined)
}

// A handover written on a record that is full of diagnostics fits: the store cuts the
// verified steps' last_error texts, then drops the parked lists their artifacts hold, and
// keeps the failing step's own error, the lease release and the handover.
func TestHandoverWriteFitsAFullRecord(t *testing.T) {
	f := setup(t)
	ctx := testContext(t)
	r := parkedRecord("INV-20261101-0001-", strings.Repeat("no line items found ", 3), true)
	r.RunID = longRun
	for _, name := range pipeline {
		r.Step(name).SetLastError(strings.Repeat("x", kc.MaxLastError))
	}
	r.Step("report").Status = kc.Pending
	if _, err := kc.Encode(r); err == nil {
		t.Fatal("the test record fits as it is: it proves nothing")
	}
	// Give the record room enough to be created, then fill it as a run would have.
	small := r.Clone()
	for _, name := range pipeline {
		small.Step(name).Parked, small.Step(name).LastError = []kc.Parked{}, nil
	}
	if _, err := f.store.Create(ctx, small); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if _, _, err := f.store.Mutate(ctx, longRun, func(n *kc.Record) error {
		for _, name := range pipeline {
			n.Step(name).Parked = r.Step(name).Parked[:3]
			n.Step(name).LastError = r.Step(name).LastError
		}
		return nil
	}); err != nil {
		t.Fatalf("filling the record: %v", err)
	}
	cause := strings.Repeat("the relay refused the report; ", 30)
	got, _, err := f.store.Mutate(ctx, longRun, func(n *kc.Record) error {
		for _, name := range pipeline {
			n.Step(name).Parked = r.Step(name).Parked
		}
		failLong(n, "report")
		n.Step("report").SetLastError(cause)
		return nil
	})
	if err != nil {
		t.Fatalf("the handover write was refused: %v", err)
	}
	stored, _ := f.load(t, longRun)
	if stored.Status != kc.HandedOver || stored.Handover == nil || stored.Step("report").Status != kc.Failed {
		t.Fatalf("stored: status %s, handover %v, report %s", stored.Status, stored.Handover, stored.Step("report").Status)
	}
	if e := stored.Step("report").LastError; e == nil || *e != cause[:kc.MaxLastError] {
		t.Errorf("the failing step's error was cut: %v", e)
	}
	if e := stored.Step("fetch").LastError; e != nil && len(*e) > kc.MaxKeptError {
		t.Errorf("a verified step kept %d bytes of error", len(*e))
	}
	if got.Step("fetch").ParkedCount != 500 || got.Step("fetch").ParkedArtifact == nil {
		t.Errorf("fetch's parked count and artifact were lost: %d, %v", got.Step("fetch").ParkedCount, got.Step("fetch").ParkedArtifact)
	}
}

// Fit gives up nothing but diagnostics: a record too large for other reasons stays too large.
func TestFitRefusesWhatIsNotADiagnostic(t *testing.T) {
	r := newRecord("run-1")
	r.NextAction = strings.Repeat("x", kc.MaxSize)
	if err := kc.Fit(r); err == nil {
		t.Fatal("Fit made a record with an 8 KiB next_action fit")
	}
	if len(r.NextAction) != kc.MaxSize {
		t.Errorf("Fit changed next_action")
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// An inline output is room lent: a record whose verified steps keep 600-byte outputs inline
// leaves the next step its room (StepRoom counts them as objects), a write that fits moves
// nothing, and the failure and handover that do not fit move the largest outputs to the
// artifact store, as few as it takes, so the failing step's error is kept in full. A store
// without a mover gives up that diagnostic instead.
func TestAWriteMovesInlineOutputsOnlyWhenItMustFit(t *testing.T) {
	f := setup(t)
	ctx := testContext(t)
	obj, err := f.js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "cairn-artifacts"})
	if err != nil || obj == nil {
		t.Fatal(err)
	}
	art, err := artifacts.Open(ctx, f.js, "cairn-artifacts")
	if err != nil {
		t.Fatal(err)
	}
	var moves atomic.Int32
	mover := func(ctx context.Context, runID, step string, b []byte) (*kc.Output, error) {
		moves.Add(1)
		return art.SaveObject(ctx, runID, step, b)
	}
	full := func(runID string) *kc.Record {
		r := newRecord(runID)
		r.Epoch = testEpoch
		for _, name := range pipeline[:6] {
			out, err := art.Save(ctx, runID, name, []byte(`{"step":"`+name+`","pad":"`+strings.Repeat("p", 610)+`"}`))
			if err != nil || len(out.Inline) == 0 {
				t.Fatalf("output of %s: %+v, %v; want it inline", name, out, err)
			}
			s := r.Step(name)
			s.Status, s.Output, s.Token, s.Attempts = kc.Verified, out, kc.Ptr(uint64(40)), 1
			s.StartedAt, s.FinishedAt = kc.Ptr("2026-10-13T22:00:04.123456789Z"), kc.Ptr("2026-10-13T22:00:05.123456789Z")
			s.Versions.Code = kc.Ptr("v0.1.0")
		}
		return r
	}
	for _, moving := range []bool{true, false} {
		runID := map[bool]string{true: "run-lent", false: "run-no-mover"}[moving]
		moves.Store(0)
		store := f.store
		if moving {
			store = f.store.Moving(mover)
		}
		r := full(runID)
		if n, _ := kc.Size(r); n > kc.MaxSize || n < kc.MaxSize-700 {
			t.Fatalf("the record is %d bytes: it must fit, and be within a failure of %d", n, kc.MaxSize)
		}
		if room := kc.StepRoom(r, "update-stock"); room < 0 {
			t.Fatalf("StepRoom(update-stock) = %d: the inline outputs are not counted as room lent", room)
		}
		if _, err := store.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		if _, _, err := store.Mutate(ctx, runID, func(n *kc.Record) error {
			n.Step("update-stock").Status = kc.InProgress
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if got := moves.Load(); got != 0 {
			t.Fatalf("a write that fits moved %d outputs", got)
		}
		cause := strings.Repeat("the stock API said no; ", 40)
		_, _, err := store.Mutate(ctx, runID, func(n *kc.Record) error {
			failLong(n, "update-stock")
			n.Step("update-stock").SetLastError(cause)
			return nil
		})
		stored, _ := f.load(t, runID)
		if !moving {
			if err == nil && *stored.Step("update-stock").LastError == cause[:kc.MaxLastError] {
				t.Fatal("without a mover the failure fit in full: the test proves nothing")
			}
			continue
		}
		if err != nil {
			t.Fatalf("the failure write was refused: %v", err)
		}
		if e := stored.Step("update-stock").LastError; stored.Status != kc.HandedOver || e == nil || *e != cause[:kc.MaxLastError] {
			t.Fatalf("stored: status %s, error %v; want handed over with the error in full", stored.Status, e)
		}
		var objects []string
		for _, name := range pipeline[:6] {
			o, want := stored.Step(name).Output, r.Step(name).Output
			if o.Digest != want.Digest || o.Size != want.Size {
				t.Fatalf("%s's output is %+v, want digest %s", name, o, want.Digest)
			}
			if o.Object == "" {
				continue
			}
			objects = append(objects, name)
			b, err := art.Load(ctx, o)
			if err != nil || string(b) != string(want.Inline) {
				t.Fatalf("%s's moved output reads back %q, %v", name, b, err)
			}
		}
		if len(objects) == 0 || len(objects) == 6 || int(moves.Load()) != len(objects) {
			t.Fatalf("moved %v (%d moves); want the fewest that make room, not all", objects, moves.Load())
		}
		t.Logf("moved %v to fit the failure", objects)
	}
}
