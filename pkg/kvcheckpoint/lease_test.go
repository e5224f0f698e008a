package kvcheckpoint_test

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

func TestTakeToken(t *testing.T) {
	f := setup(t)
	ctx := testContext(t)
	rec, rev := f.created(t, "run-1")
	h, err := f.store.Take(ctx, rec, rev, ownerA, "fetch", func(r *kc.Record) {
		r.Step("fetch").Status = kc.InProgress
	})
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	if h.Token() != rev {
		t.Errorf("Token = %d, want the revision read, %d", h.Token(), rev)
	}
	got, grev := f.load(t, "run-1")
	want := kc.Lease{Owner: ownerA.Name, OwnerInbox: ownerA.Inbox, Token: rev, Step: "fetch"}
	if got.Lease == nil || got.Lease.WriteID == "" {
		t.Fatalf("lease = %+v, want one with a write_id", got.Lease)
	}
	l := *got.Lease
	l.WriteID = ""
	if l != want {
		t.Errorf("lease = %+v, want %+v", l, want)
	}
	if got.Step("fetch").Status != kc.InProgress {
		t.Errorf("fetch is %s, want in_progress (prepare runs in the same write)", got.Step("fetch").Status)
	}
	hrec, hrev := h.Record()
	if hrev != grev || !reflect.DeepEqual(hrec, got) {
		t.Errorf("holder's record at %d differs from the stored one at %d", hrev, grev)
	}

	// The same stale revision again: someone else's take (or any write) came first.
	if _, err := f.store.Take(ctx, rec, rev, ownerB, "fetch", nil); !errors.Is(err, kc.ErrConflict) {
		t.Errorf("second Take on revision %d = %v, want ErrConflict", rev, err)
	}
	if _, now := f.load(t, "run-1"); now != grev {
		t.Errorf("the refused Take wrote: revision %d, was %d", now, grev)
	}
}

func TestTakeRace(t *testing.T) {
	f := setup(t)
	rec, rev := f.created(t, "run-1")
	owners := []kc.Owner{ownerA, ownerB}
	type result struct {
		owner kc.Owner
		h     *kc.Holder
		err   error
	}
	start := make(chan struct{})
	results := make(chan result, len(owners))
	var wg sync.WaitGroup
	for _, o := range owners {
		wg.Go(func() {
			<-start
			h, err := f.store.Take(testContext(t), rec.Clone(), rev, o, "fetch", nil)
			results <- result{o, h, err}
		})
	}
	close(start)
	wg.Wait()
	close(results)
	var winners []result
	for r := range results {
		switch {
		case r.err == nil:
			winners = append(winners, r)
		case !errors.Is(r.err, kc.ErrConflict):
			t.Errorf("Take as %s: %v, want nil or ErrConflict", r.owner.Name, r.err)
		}
	}
	if len(winners) != 1 {
		t.Fatalf("%d takes won, want exactly 1", len(winners))
	}
	got, _ := f.load(t, "run-1")
	if got.Lease == nil || got.Lease.Owner != winners[0].owner.Name || got.Lease.Token != rev {
		t.Errorf("lease = %+v, want the winner %s with token %d", got.Lease, winners[0].owner.Name, rev)
	}
}

func TestWriteAndRenew(t *testing.T) {
	f := setup(t)
	ctx := testContext(t)
	f.created(t, "run-1")
	h := f.take(t, "run-1", "fetch", ownerA)
	before, brev := f.load(t, "run-1")

	if err := h.Renew(ctx); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	renewed, rrev := f.load(t, "run-1")
	if rrev != brev+1 {
		t.Errorf("Renew: revision %d, want %d", rrev, brev+1)
	}
	if renewed.Lease.WriteID == before.Lease.WriteID {
		t.Errorf("Renew kept write_id %q, want a fresh one", renewed.Lease.WriteID)
	}
	if renewed.Lease.Token != h.Token() || renewed.Lease.Owner != ownerA.Name {
		t.Errorf("Renew changed the lease owner or token: %+v", renewed.Lease)
	}

	if err := h.Write(ctx, func(r *kc.Record) error { r.Step("fetch").Effects = &kc.Effects{Keys: 3}; return nil }); err != nil {
		t.Fatalf("Write: %v", err)
	}
	got, _ := f.load(t, "run-1")
	if e := got.Step("fetch").Effects; e == nil || e.Keys != 3 {
		t.Errorf("effects = %+v, want 3 keys", e)
	}

	fnErr := errors.New("nothing to do")
	if err := h.Write(ctx, func(*kc.Record) error { return fnErr }); !errors.Is(err, fnErr) {
		t.Errorf("Write with a failing fn = %v, want its error", err)
	}
}

// TestWriteReapplies: a non-holder's write (a cancel, the supervisor's bookkeeping) copies the
// lease; the holder's next write meets a revision mismatch, re-reads, finds its own lease, and
// applies its change again on the new revision.
func TestWriteReapplies(t *testing.T) {
	f := setup(t)
	ctx := testContext(t)
	f.created(t, "run-1")
	h := f.take(t, "run-1", "fetch", ownerA)
	_, mrev, err := f.store.Mutate(ctx, "run-1", func(r *kc.Record) error {
		r.NextAction = "cancel at the next step boundary"
		r.AddRequest("cancel-1")
		return nil
	})
	if err != nil {
		t.Fatalf("Mutate: %v", err)
	}
	calls := 0
	if err := h.Write(ctx, func(r *kc.Record) error {
		calls++
		r.Step("fetch").Attempts = 7
		return nil
	}); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if calls != 2 {
		t.Errorf("fn ran %d times, want 2 (once on the stale record, once on the new)", calls)
	}
	got, grev := f.load(t, "run-1")
	if grev != mrev+1 {
		t.Errorf("revision %d, want %d", grev, mrev+1)
	}
	if got.Step("fetch").Attempts != 7 || got.NextAction != "cancel at the next step boundary" || !got.HasRequest("cancel-1") {
		t.Errorf("record = attempts %d, next %q, requests %v; want both writers' changes",
			got.Step("fetch").Attempts, got.NextAction, got.Requests)
	}
	if got.Lease == nil || got.Lease.Owner != ownerA.Name || got.Lease.Token != h.Token() {
		t.Errorf("lease = %+v, want A's", got.Lease)
	}
	hrec, hrev := h.Record()
	if hrev != grev || !reflect.DeepEqual(hrec, got) {
		t.Errorf("holder's record at %d differs from the stored one at %d", hrev, grev)
	}
}

// TestWriteFenced: the supervisor released A's lease and B took the step; A's next write and
// heartbeat find another token and write nothing.
func TestWriteFenced(t *testing.T) {
	for _, tc := range []struct {
		name   string
		after  func(t *testing.T, f *fixture) // what happens to the lease behind A's back
		retake bool                           // then B takes the step
	}{
		{
			name:   "taken by another worker",
			retake: true,
			after: func(t *testing.T, f *fixture) {
				if _, _, err := f.store.Mutate(testContext(t), "run-1", func(r *kc.Record) error {
					r.Lease = nil
					r.Step("fetch").Status = kc.Pending
					return nil
				}); err != nil {
					t.Fatalf("releasing: %v", err)
				}
			},
		},
		{
			name: "released, nobody holds it",
			after: func(t *testing.T, f *fixture) {
				if _, _, err := f.store.Mutate(testContext(t), "run-1", func(r *kc.Record) error {
					r.Lease = nil
					return nil
				}); err != nil {
					t.Fatalf("releasing: %v", err)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t)
			ctx := testContext(t)
			f.created(t, "run-1")
			a := f.take(t, "run-1", "fetch", ownerA)
			tc.after(t, f)
			var b *kc.Holder
			if tc.retake {
				b = f.take(t, "run-1", "fetch", ownerB)
				if b.Token() <= a.Token() {
					t.Fatalf("later take's token %d is not above the earlier %d", b.Token(), a.Token())
				}
			}
			want, wrev := f.load(t, "run-1")

			if err := a.Write(ctx, func(r *kc.Record) error { r.Step("fetch").Status = kc.Verified; return nil }); !errors.Is(err, kc.ErrFenced) {
				t.Errorf("stale Write = %v, want ErrFenced", err)
			}
			if err := a.Renew(ctx); !errors.Is(err, kc.ErrFenced) {
				t.Errorf("stale Renew = %v, want ErrFenced", err)
			}
			if err := a.Release(ctx, func(r *kc.Record) error {
				s := r.Step("fetch")
				s.Status = kc.Pending
				s.Attempts++
				return nil
			}); !errors.Is(err, kc.ErrFenced) {
				t.Errorf("stale Release = %v, want ErrFenced", err)
			}
			got, grev := f.load(t, "run-1")
			if grev != wrev || !reflect.DeepEqual(got, want) {
				t.Errorf("the fenced holder wrote: revision %d, was %d", grev, wrev)
			}
			if b != nil {
				if err := b.Renew(ctx); err != nil {
					t.Errorf("the new holder's Renew: %v", err)
				}
			}
		})
	}
}

func TestRelease(t *testing.T) {
	f := setup(t)
	ctx := testContext(t)
	f.created(t, "run-1")
	h := f.take(t, "run-1", "fetch", ownerA)
	token := h.Token()
	if err := h.Release(ctx, func(r *kc.Record) error {
		s := r.Step("fetch")
		s.Status = kc.Verified
		s.Token = &token
		r.NextAction = "extract line items"
		return nil
	}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	got, _ := f.load(t, "run-1")
	if got.Lease != nil {
		t.Errorf("lease = %+v after Release, want null", got.Lease)
	}
	if s := got.Step("fetch"); s.Status != kc.Verified || s.Token == nil || *s.Token != token {
		t.Errorf("fetch = %s token %v, want verified with token %d in the same write", s.Status, s.Token, token)
	}
	// The step is free for the next worker, whose token is larger.
	next := f.take(t, "run-1", "extract", ownerB)
	if next.Token() <= token {
		t.Errorf("next token %d is not above %d", next.Token(), token)
	}
}

// TestHolderConcurrentCalls: the heartbeat renews while the attempt writes; the holder
// serialises them and every write lands.
func TestHolderConcurrentCalls(t *testing.T) {
	f := setup(t)
	f.created(t, "run-1")
	h := f.take(t, "run-1", "fetch", ownerA)
	_, rev := h.Record()
	const n = 10
	errs := make(chan error, 2*n)
	var wg sync.WaitGroup
	wg.Go(func() {
		for range n {
			errs <- h.Renew(testContext(t))
		}
	})
	wg.Go(func() {
		for i := range n {
			errs <- h.Write(testContext(t), func(r *kc.Record) error {
				r.NextAction = fmt.Sprintf("write %d", i)
				return nil
			})
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("holder call: %v", err)
		}
	}
	got, grev := f.load(t, "run-1")
	if grev != rev+2*n {
		t.Errorf("revision %d, want %d after %d writes", grev, rev+2*n, 2*n)
	}
	if got.NextAction != fmt.Sprintf("write %d", n-1) {
		t.Errorf("next_action = %q, want the last write's", got.NextAction)
	}
}
