package kvcheckpoint_test

import (
	"encoding/json"
	"errors"
	"os"
	"testing"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// Every invariant a reader relies on: a record that breaks one, though its sum holds, is
// ErrCorrupt and ErrInvariant when the store reads it, and is not written over.
func TestLoadChecksInvariants(t *testing.T) {
	f := setup(t)
	ctx := testContext(t)
	strict, err := kc.Open(ctx, f.js, kc.Bucket, kc.WithPipeline(pipeline))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		key    string // "" is the record's run id
		change func(r *kc.Record)
		strict bool // broken only against the definition
	}{
		{name: "run id not the key", key: "run-other", change: func(r *kc.Record) {}},
		{name: "empty pipeline", change: func(r *kc.Record) { r.Pipeline, r.Steps = []string{}, map[string]*kc.Step{} }},
		{name: "null pipeline", change: func(r *kc.Record) { r.Pipeline, r.Steps = nil, nil }},
		{name: "pipeline not the definition", strict: true, change: func(r *kc.Record) {
			r.Pipeline = r.Pipeline[:3]
			for _, s := range pipeline[3:] {
				delete(r.Steps, s)
			}
		}},
		{name: "pipeline reordered", strict: true, change: func(r *kc.Record) { r.Pipeline[0], r.Pipeline[1] = r.Pipeline[1], r.Pipeline[0] }},
		{name: "a step twice", change: func(r *kc.Record) { r.Pipeline = append(r.Pipeline, "fetch") }},
		{name: "a step with no name", change: func(r *kc.Record) { r.Pipeline = append(r.Pipeline, ""); r.Steps[""] = kc.NewStep() }},
		{name: "a step entry outside the pipeline", change: func(r *kc.Record) { r.Steps["rogue"] = kc.NewStep() }},
		{name: "unknown run status", change: func(r *kc.Record) { r.Status = "exploding" }},
		{name: "unknown step status", change: func(r *kc.Record) { r.Steps["match"].Status = "half" }},
		{name: "waiting with no approval", change: func(r *kc.Record) { r.Status, r.Approval = kc.WaitingApproval, nil }},
		{name: "approval of a step outside the pipeline", change: func(r *kc.Record) {
			r.Status, r.Approval = kc.WaitingApproval, &kc.Approval{Step: "rogue", PlanDigest: "sha256:x", Since: r.CreatedAt}
		}},
		{name: "lease of a step outside the pipeline", change: func(r *kc.Record) {
			r.Lease = &kc.Lease{Owner: "o", OwnerInbox: "cairn.owner.x.y", Token: 1, Step: "rogue", WriteID: "w"}
		}},
		{name: "undo cursor negative", change: func(r *kc.Record) {
			r.Status, r.Undo = kc.Undoing, &kc.Undo{RequestID: "u", Cursor: -1, PreviousStatus: kc.Done}
		}},
		{name: "undo previous status unknown", change: func(r *kc.Record) {
			r.Status, r.Undo = kc.Undoing, &kc.Undo{RequestID: "u", PreviousStatus: "gone"}
		}},
		{name: "negative generation", change: func(r *kc.Record) { r.Generation = -1 }},
		{name: "after missing a step", change: func(r *kc.Record) { r.After = kc.Graph{"fetch": {}} }},
		{name: "after waiting on a later step", change: func(r *kc.Record) {
			r.After = kc.Graph{}
			for _, s := range r.Pipeline {
				r.After[s] = []string{}
			}
			r.After["fetch"] = []string{"report"}
		}},
		{name: "after waiting on a step outside the pipeline", change: func(r *kc.Record) {
			r.After = kc.Graph{}
			for _, s := range r.Pipeline {
				r.After[s] = []string{}
			}
			r.After["report"] = []string{"rogue"}
		}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			runID := "run-inv-" + string(rune('a'+i))
			rec := newRecord(runID)
			rec.Epoch = testEpoch
			c.change(rec)
			b, err := kc.Encode(rec)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if _, err := kc.Decode(b); err != nil && !errors.Is(err, kc.ErrCorrupt) {
				t.Fatalf("Decode: %v, want it decoded (its sum holds) or ErrCorrupt", err)
			}
			key := runID
			if c.key != "" {
				key = c.key
			}
			rev, err := f.kv.Put(ctx, key, b)
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = strict.Load(ctx, key)
			if !errors.Is(err, kc.ErrInvariant) || !errors.Is(err, kc.ErrCorrupt) {
				t.Fatalf("Load with the definition = %v, want ErrInvariant and ErrCorrupt", err)
			}
			_, _, err = f.store.Load(ctx, key)
			if c.strict && err != nil {
				t.Fatalf("Load with no definition = %v, want the record (only the definition forbids it)", err)
			}
			if !c.strict && (!errors.Is(err, kc.ErrInvariant) || !errors.Is(err, kc.ErrCorrupt)) {
				t.Fatalf("Load with no definition = %v, want ErrInvariant and ErrCorrupt", err)
			}
			_, _, err = strict.Mutate(ctx, key, func(r *kc.Record) error { r.NextAction = "x"; return nil })
			if !errors.Is(err, kc.ErrInvariant) {
				t.Fatalf("Mutate = %v, want ErrInvariant", err)
			}
			if e, err := f.kv.Get(ctx, key); err != nil || e.Revision() != rev {
				t.Fatalf("the broken record was written over: %v, revision %d, put at %d", err, e.Revision(), rev)
			}
		})
	}
}

// The records Cairn writes keep every invariant: a new one, one under the compensator's
// lease, one waiting for approval, and the schema 1 record of an earlier release.
func TestCheckTakesRecordsCairnWrites(t *testing.T) {
	good := map[string]*kc.Record{"new": newRecord("run-1")}
	undoing := newRecord("run-1")
	undoing.Status = kc.Undoing
	undoing.Lease = &kc.Lease{Owner: "compensator/h/1", OwnerInbox: "cairn.owner.compensator.x", Token: 4, Step: kc.UndoLease, WriteID: "w"}
	undoing.Undo = &kc.Undo{RequestID: "u", PreviousStatus: kc.Done}
	good["undoing"] = undoing
	waiting := newRecord("run-1")
	waiting.Status = kc.WaitingApproval
	waiting.Approval = &kc.Approval{Step: "debit-notes", PlanDigest: "sha256:ab", Since: waiting.CreatedAt}
	good["waiting"] = waiting
	for name, r := range good {
		if err := r.Check("run-1", pipeline); err != nil {
			t.Errorf("%s: Check = %v, want nil", name, err)
		}
	}
	b, err := os.ReadFile("testdata/schema1.json")
	if err != nil {
		t.Fatal(err)
	}
	old, err := kc.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Check("run-2026-10-13-ldh", pipeline); err != nil {
		t.Errorf("schema 1 record: Check = %v, want nil", err)
	}
}

// FuzzCheck: any record that decodes (its sum made as the code makes it) either breaks an
// invariant, named by ErrInvariant, or takes every accessor the readers call without a panic.
func FuzzCheck(f *testing.F) {
	b, err := os.ReadFile("testdata/schema1.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b, true)
	r := newRecord("run-1")
	r.Lease = &kc.Lease{Owner: "o", OwnerInbox: "cairn.owner.fetch.x", Token: 1, Step: "fetch", WriteID: "w"}
	r.Approval = &kc.Approval{Step: "debit-notes", PlanDigest: "sha256:ab", Since: r.CreatedAt}
	r.Undo = &kc.Undo{RequestID: "u", Cursor: 1, Total: 2, PreviousStatus: kc.Done}
	r.Commands = []kc.Command{{Verb: "resume", RequestID: "r-1", By: "ops", At: r.CreatedAt}}
	if b, err = kc.Encode(r); err != nil {
		f.Fatal(err)
	}
	f.Add(b, false)
	f.Fuzz(func(t *testing.T, b []byte, strict bool) {
		var in kc.Record
		if json.Unmarshal(b, &in) != nil {
			return
		}
		enc, err := kc.Encode(&in)
		if err != nil {
			return
		}
		rec, err := kc.Decode(enc)
		if err != nil {
			return
		}
		var want []string
		if strict {
			want = pipeline
		}
		if err := rec.Check(rec.RunID, want); err != nil {
			if !errors.Is(err, kc.ErrInvariant) || !errors.Is(err, kc.ErrCorrupt) {
				t.Fatalf("Check = %v, want ErrInvariant and ErrCorrupt", err)
			}
			return
		}
		cur := rec.Current()
		_ = rec.AllVerified()
		for _, s := range rec.Pipeline {
			_ = rec.EarlierVerified(s)
			_ = rec.Next(s)
			_ = rec.Step(s)
		}
		_ = kc.StepRoom(rec, cur)
		if a := rec.Approval; a != nil {
			_ = rec.Step(a.Step)
		}
		if l := rec.Lease; l != nil && l.Step != kc.UndoLease {
			_ = rec.Step(l.Step)
		}
		c := rec.Clone()
		_, _ = c.Wait(kc.Command{Verb: "resume", RequestID: "r-2"})
		_ = kc.Progressed(rec, c)
	})
}
