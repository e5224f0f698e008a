package kvcheckpoint_test

import (
	"errors"
	"reflect"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

func TestOpen(t *testing.T) {
	f := setup(t)
	if got := f.store.Epoch(); got != testEpoch {
		t.Errorf("Epoch = %q, want %q", got, testEpoch)
	}
	ctx := testContext(t)
	if _, err := f.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "no-epoch"}); err != nil {
		t.Fatalf("creating bucket: %v", err)
	}
	if _, err := kc.Open(ctx, f.js, "no-epoch"); !errors.Is(err, kc.ErrNoEpoch) {
		t.Errorf("Open of a bucket without %s = %v, want ErrNoEpoch", kc.EpochKey, err)
	}
	if _, err := kc.Open(ctx, f.js, "missing"); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Errorf("Open of a missing bucket = %v, want ErrBucketNotFound", err)
	}
}

func TestCreateLoad(t *testing.T) {
	f := setup(t)
	ctx := testContext(t)
	r := newRecord("run-1")
	rev, err := f.store.Create(ctx, r)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	got, lrev, err := f.store.Load(ctx, "run-1")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if lrev != rev {
		t.Errorf("Load revision = %d, Create returned %d", lrev, rev)
	}
	if got.Epoch != testEpoch || got.Schema != kc.Schema {
		t.Errorf("record epoch %q schema %d, want %q %d", got.Epoch, got.Schema, testEpoch, kc.Schema)
	}
	if !reflect.DeepEqual(got, r) {
		t.Errorf("Load = %+v, want the record created %+v", got, r)
	}

	if _, err := f.store.Create(ctx, newRecord("run-1")); !errors.Is(err, kc.ErrExists) {
		t.Errorf("second Create = %v, want ErrExists", err)
	}
	if _, again, _ := f.store.Load(ctx, "run-1"); again != rev {
		t.Errorf("second Create moved the revision from %d to %d", rev, again)
	}
	if _, _, err := f.store.Load(ctx, "run-2"); !errors.Is(err, kc.ErrNotFound) {
		t.Errorf("Load of a missing run = %v, want ErrNotFound", err)
	}
	if _, _, err := f.store.LoadAuthoritative(ctx, "run-2"); !errors.Is(err, kc.ErrNotFound) {
		t.Errorf("LoadAuthoritative of a missing run = %v, want ErrNotFound", err)
	}
}

func TestLoadAuthoritative(t *testing.T) {
	f := setup(t)
	ctx := testContext(t)
	f.created(t, "run-1")
	f.created(t, "run-2") // another key in between, so revisions and stream sequences differ from 1
	h := f.take(t, "run-1", "fetch", ownerA)
	if err := h.Release(ctx, func(r *kc.Record) error { r.Step("fetch").Status = kc.Verified; return nil }); err != nil {
		t.Fatalf("Release: %v", err)
	}
	want, wrev := f.load(t, "run-1")
	got, grev, err := f.store.LoadAuthoritative(ctx, "run-1")
	if err != nil {
		t.Fatalf("LoadAuthoritative: %v", err)
	}
	if grev != wrev {
		t.Errorf("LoadAuthoritative revision = %d, Load's %d", grev, wrev)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("LoadAuthoritative = %+v, Load = %+v", got, want)
	}
	if err := f.kv.Delete(ctx, "run-2"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, _, err := f.store.LoadAuthoritative(ctx, "run-2"); !errors.Is(err, kc.ErrNotFound) {
		t.Errorf("LoadAuthoritative of a deleted run = %v, want ErrNotFound", err)
	}
}

func TestLoadCorruptAndForeign(t *testing.T) {
	f := setup(t)
	ctx := testContext(t)

	// A stored record with one byte changed: never trusted.
	_, rev := f.created(t, "run-1")
	e, err := f.kv.Get(ctx, "run-1")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	bad := []byte(string(e.Value()))
	i := len(`{"schema":1,"run_id":"run-`)
	bad[i] = '2'
	if _, err := f.kv.Update(ctx, "run-1", bad, rev); err != nil {
		t.Fatalf("storing the changed record: %v", err)
	}
	if _, _, err := f.store.Load(ctx, "run-1"); !errors.Is(err, kc.ErrCorrupt) {
		t.Errorf("Load of a changed record = %v, want ErrCorrupt", err)
	}
	if _, _, err := f.store.LoadAuthoritative(ctx, "run-1"); !errors.Is(err, kc.ErrCorrupt) {
		t.Errorf("LoadAuthoritative of a changed record = %v, want ErrCorrupt", err)
	}
	// Never written back: a Mutate refuses it and leaves it as it is.
	if _, _, err := f.store.Mutate(ctx, "run-1", func(r *kc.Record) error { r.NextAction = "x"; return nil }); !errors.Is(err, kc.ErrCorrupt) {
		t.Errorf("Mutate of a corrupt record = %v, want ErrCorrupt", err)
	}
	if e2, _ := f.kv.Get(ctx, "run-1"); e2.Revision() != e.Revision()+1 || string(e2.Value()) != string(bad) {
		t.Errorf("the corrupt record was rewritten: revision %d", e2.Revision())
	}

	// A well-formed record of another epoch (NATS storage replaced while the record survived).
	foreign := newRecord("run-3")
	foreign.Epoch = "e0"
	b, err := kc.Encode(foreign)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	if _, err := f.kv.Create(ctx, "run-3", b); err != nil {
		t.Fatalf("storing the foreign record: %v", err)
	}
	if _, _, err := f.store.Load(ctx, "run-3"); !errors.Is(err, kc.ErrForeignEpoch) {
		t.Errorf("Load of a foreign record = %v, want ErrForeignEpoch", err)
	}
	if _, _, err := f.store.LoadAuthoritative(ctx, "run-3"); !errors.Is(err, kc.ErrForeignEpoch) {
		t.Errorf("LoadAuthoritative of a foreign record = %v, want ErrForeignEpoch", err)
	}
}

func TestMutateConcurrent(t *testing.T) {
	f := setup(t)
	_, rev := f.created(t, "run-1")
	ids := []string{"cmd-a", "cmd-b", "cmd-c", "cmd-d", "cmd-e"}
	start := make(chan struct{})
	errs := make(chan error, len(ids))
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			<-start
			_, _, err := f.store.Mutate(testContext(t), "run-1", func(r *kc.Record) error {
				if r.HasRequest(id) {
					return kc.ErrSkip
				}
				r.AddRequest(id)
				return nil
			})
			errs <- err
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Mutate: %v", err)
		}
	}
	got, grev := f.load(t, "run-1")
	for _, id := range ids {
		if !got.HasRequest(id) {
			t.Errorf("request %q lost; requests = %v", id, got.Requests)
		}
	}
	if len(got.Requests) != len(ids) {
		t.Errorf("requests = %v, want each of %v once", got.Requests, ids)
	}
	if grev != rev+uint64(len(ids)) {
		t.Errorf("revision %d after %d writes from %d", grev, len(ids), rev)
	}
}

func TestMutateSkip(t *testing.T) {
	f := setup(t)
	ctx := testContext(t)
	_, rev := f.created(t, "run-1")
	got, grev, err := f.store.Mutate(ctx, "run-1", func(r *kc.Record) error {
		r.NextAction = "not to be written"
		return kc.ErrSkip
	})
	if !errors.Is(err, kc.ErrSkip) {
		t.Fatalf("Mutate = %v, want ErrSkip", err)
	}
	if grev != rev || got == nil || got.NextAction != "" {
		t.Errorf("Mutate returned revision %d and %+v, want the record read at %d", grev, got, rev)
	}
	if _, now := f.load(t, "run-1"); now != rev {
		t.Errorf("ErrSkip wrote: revision %d, was %d", now, rev)
	}
}

// TestMutateFromStale: a record read before another write is re-read, and the change applied
// on the new revision.
func TestMutateFromStale(t *testing.T) {
	f := setup(t)
	ctx := testContext(t)
	old, rev := f.created(t, "run-1")
	if _, _, err := f.store.Mutate(ctx, "run-1", func(r *kc.Record) error { r.Generation = 1; return nil }); err != nil {
		t.Fatalf("Mutate: %v", err)
	}
	got, grev, err := f.store.MutateFrom(ctx, old, rev, "run-1", func(r *kc.Record) error {
		r.NextAction = "rerun from match"
		return nil
	})
	if err != nil {
		t.Fatalf("MutateFrom: %v", err)
	}
	if grev != rev+2 || got.Generation != 1 || got.NextAction != "rerun from match" {
		t.Errorf("MutateFrom = revision %d, generation %d, next %q; want %d, 1, both changes", grev, got.Generation, got.NextAction, rev+2)
	}
	if loaded, _ := f.load(t, "run-1"); !reflect.DeepEqual(loaded, got) {
		t.Errorf("stored %+v, MutateFrom returned %+v", loaded, got)
	}
}

func TestMutateCopiesLease(t *testing.T) {
	f := setup(t)
	ctx := testContext(t)
	f.created(t, "run-1")
	h := f.take(t, "run-1", "fetch", ownerA)
	if _, _, err := f.store.Mutate(ctx, "run-1", func(r *kc.Record) error { r.Status = kc.Cancelled; return nil }); err != nil {
		t.Fatalf("Mutate: %v", err)
	}
	got, _ := f.load(t, "run-1")
	if got.Lease == nil || got.Lease.Owner != ownerA.Name || got.Lease.Token != h.Token() {
		t.Errorf("lease after a non-holder's write = %+v, want A's with token %d", got.Lease, h.Token())
	}
}
