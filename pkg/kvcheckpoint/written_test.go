package kvcheckpoint_test

import (
	"testing"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// LoadAt hands back the record this store wrote at the revision asked for, once; any
// other revision, or a record another store wrote, is read from the bucket.
func TestLoadAt(t *testing.T) {
	f := setup(t)
	ctx := testContext(t)
	_, rev := f.created(t, "r1")
	rec, rev2, err := f.store.MutateFrom(ctx, nil, 0, "r1", func(r *kc.Record) error {
		r.NextAction = "mine"
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got, at, remembered, _, err := f.store.LoadAt(ctx, "r1", rev2)
	if err != nil || !remembered || at != rev2 || got.NextAction != "mine" {
		t.Fatalf("LoadAt(rev %d) = %q at %d, remembered %t, %v; want mine, remembered", rev2, got.NextAction, at, remembered, err)
	}
	if got == rec {
		t.Error("LoadAt returned the very record MutateFrom returned, not a copy")
	}
	// Taken once: the same revision again is read.
	if _, _, remembered, _, err := f.store.LoadAt(ctx, "r1", rev2); err != nil || remembered {
		t.Errorf("LoadAt the second time: remembered %t (%v), want a read", remembered, err)
	}
	// An older revision is read, and so is the latest when another store wrote it.
	if _, at, remembered, _, _ := f.store.LoadAt(ctx, "r1", rev); remembered || at != rev2 {
		t.Errorf("LoadAt(old rev %d) = at %d remembered %t; want the latest (%d), read", rev, at, remembered, rev2)
	}
	other, err := kc.Open(ctx, f.js, kc.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	_, rev3, err := other.Mutate(ctx, "r1", func(r *kc.Record) error { r.NextAction = "theirs"; return nil })
	if err != nil {
		t.Fatal(err)
	}
	got, at, remembered, _, err = f.store.LoadAt(ctx, "r1", rev3)
	if err != nil || remembered || at != rev3 || got.NextAction != "theirs" {
		t.Errorf("LoadAt(%d) after another store's write = %q at %d, remembered %t, %v", rev3, got.NextAction, at, remembered, err)
	}
}

// A write based on a remembered record that another store has since changed is refused
// and applied again on the latest: nothing the other store wrote is lost.
func TestLoadAtStaleRecordIsNotWrittenBlindly(t *testing.T) {
	f := setup(t)
	ctx := testContext(t)
	_, _ = f.created(t, "r1")
	_, rev, err := f.store.Mutate(ctx, "r1", func(r *kc.Record) error { r.NextAction = "mine"; return nil })
	if err != nil {
		t.Fatal(err)
	}
	other, err := kc.Open(ctx, f.js, kc.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := other.Mutate(ctx, "r1", func(r *kc.Record) error { r.AddRequest("cancel-1"); return nil }); err != nil {
		t.Fatal(err)
	}
	stale, at, remembered, _, err := f.store.LoadAt(ctx, "r1", rev)
	if err != nil || !remembered {
		t.Fatalf("LoadAt: remembered %t, %v", remembered, err)
	}
	got, _, err := f.store.MutateFrom(ctx, stale, at, "r1", func(r *kc.Record) error { r.Restarts = 7; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if got.Restarts != 7 || !got.HasRequest("cancel-1") {
		t.Errorf("after the write: restarts %d, requests %v; want 7 and the other store's cancel-1", got.Restarts, got.Requests)
	}
}

// LoadAt gives a remembered record's Size as written, so its room is measured without
// encoding it again: the same room as StepRoom's; a record read from the bucket has no size.
func TestLoadAtKnowsTheWrittenSize(t *testing.T) {
	f := setup(t)
	ctx := testContext(t)
	f.created(t, "r1")
	_, rev, err := f.store.MutateFrom(ctx, nil, 0, "r1", func(r *kc.Record) error {
		r.Step("fetch").Status = kc.Verified
		r.Step("fetch").Output = &kc.Output{Inline: []byte(`{"a":"b"}`), Digest: "SHA-256=x", Size: 9}
		r.NextAction = "run step extract"
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got, _, remembered, size, err := f.store.LoadAt(ctx, "r1", rev)
	if err != nil || !remembered {
		t.Fatalf("LoadAt: remembered %t, %v", remembered, err)
	}
	if n, _ := kc.Size(got); size != n {
		t.Fatalf("LoadAt size %d, Size of the record %d", size, n)
	}
	if a, b := kc.StepRoomSized(got, "extract", size), kc.StepRoom(got, "extract"); a != b {
		t.Fatalf("StepRoomSized %d, StepRoom %d", a, b)
	}
	if _, _, remembered, size, err := f.store.LoadAt(ctx, "r1", rev); err != nil || remembered || size != 0 {
		t.Fatalf("LoadAt again: remembered %t, size %d, %v; want read from the bucket, no size", remembered, size, err)
	}
}
