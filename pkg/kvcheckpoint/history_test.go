package kvcheckpoint_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/cairnhq/cairn/pkg/identity"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// An earlier revision put back is refused by every reader, however it is put: a plain put
// (no compare-and-set), or a compare-and-set over the key's real last revision. Its
// signature still holds; its history does not. The attack: after a cancel, the
// run's first revision put back made the run go on.
func TestRolledBackRecordRefused(t *testing.T) {
	f := setup(t)
	ctx := testContext(t)
	sgs, ring := signers(t, identity.Seal{}, "supervisor")
	checked, err := kc.Open(ctx, f.js, kc.Bucket, kc.WithRing(ring))
	if err != nil {
		t.Fatal(err)
	}
	sup := checked.As(sgs["supervisor"])
	const run = "run-rolled-back"
	first, err := sup.Create(ctx, newRecord(run))
	if err != nil {
		t.Fatal(err)
	}
	var l kc.Links // a watcher that saw every revision from the first
	watch := func(rev uint64) (*kc.Record, error) {
		t.Helper()
		m, err := f.js.Stream(ctx, "KV_"+kc.Bucket)
		if err != nil {
			t.Fatal(err)
		}
		msg, err := m.GetMsg(ctx, rev)
		if err != nil {
			t.Fatal(err)
		}
		return checked.DecodeWatched(ctx, &l, run, msg.Data, rev)
	}
	if _, err := watch(first); err != nil {
		t.Fatalf("the watch of the first record: %v", err)
	}
	_, rev, err := sup.Mutate(ctx, run, func(r *kc.Record) error { r.Status = kc.Cancelled; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if got, err := watch(rev); err != nil || got.Status != kc.Cancelled || got.Prev != first {
		t.Fatalf("the watch of the cancel: %+v, %v; want cancelled, written over %d", got, err, first)
	}
	if rec, _, err := checked.Load(ctx, run); err != nil || rec.Prev != first {
		t.Fatalf("Load of the cancel: %+v, %v", rec, err)
	}
	e, err := f.kv.GetRevision(ctx, run, first)
	if err != nil {
		t.Fatal(err)
	}
	old := e.Value()

	for _, c := range []struct {
		name string
		put  func() (uint64, error)
	}{
		{"plain put", func() (uint64, error) { return f.kv.Put(ctx, run, old) }},
		{"compare-and-set over the last revision", func() (uint64, error) {
			last, err := f.kv.Get(ctx, run)
			if err != nil {
				return 0, err
			}
			return f.kv.Update(ctx, run, old, last.Revision())
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			at, err := c.put()
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := checked.Load(ctx, run); !errors.Is(err, kc.ErrRolledBack) || !errors.Is(err, kc.ErrCorrupt) {
				t.Errorf("Load = %v, want ErrRolledBack and ErrCorrupt", err)
			}
			if _, _, err := checked.LoadAuthoritative(ctx, run); !errors.Is(err, kc.ErrRolledBack) {
				t.Errorf("LoadAuthoritative = %v, want ErrRolledBack", err)
			}
			if _, err := checked.DecodeEntry(ctx, run, old, at); !errors.Is(err, kc.ErrRolledBack) {
				t.Errorf("DecodeEntry = %v, want ErrRolledBack", err)
			}
			if _, err := watch(at); !errors.Is(err, kc.ErrRolledBack) {
				t.Errorf("DecodeWatched = %v, want ErrRolledBack", err)
			}
			var fresh kc.Links // a watcher that starts here, with no memory
			if _, err := checked.DecodeWatched(ctx, &fresh, run, old, at); !errors.Is(err, kc.ErrRolledBack) {
				t.Errorf("DecodeWatched of a fresh watch = %v, want ErrRolledBack", err)
			}
			// Nobody writes over it: a write reads it first.
			if _, _, err := sup.Mutate(ctx, run, func(r *kc.Record) error { r.Status = kc.Running; return nil }); !errors.Is(err, kc.ErrRolledBack) {
				t.Errorf("Mutate over it = %v, want ErrRolledBack", err)
			}
		})
	}

	// Without a ring (a store that trusts what it reads) nothing is checked, as for signatures.
	if _, _, err := f.store.Load(ctx, run); err != nil {
		t.Fatalf("Load without a ring: %v", err)
	}
}

// A record of the schema before records were chained (no prev) is taken at or below the
// seal's history revision, as the previous release left it, and its first write chains it;
// the same bytes put back above the seal are refused.
func TestUnchainedRecordsBelowTheSealsHistory(t *testing.T) {
	f := setup(t)
	ctx := testContext(t)
	sgs, _ := signers(t, identity.Seal{}, "supervisor")
	old := signedAsSchema5(t, sgs["supervisor"], "run-old")
	at, err := f.kv.Create(ctx, "run-old", old)
	if err != nil {
		t.Fatal(err)
	}
	ring := identity.NewRing(map[string]string{"supervisor": sgs["supervisor"].PublicKey()}, identity.Seal{History: at, Chained: true})
	checked, err := kc.Open(ctx, f.js, kc.Bucket, kc.WithRing(ring))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := checked.Load(ctx, "run-old"); err != nil {
		t.Fatalf("Load of an unchained record at the seal's history: %v", err)
	}
	sup := checked.As(sgs["supervisor"])
	rec, rev, err := sup.Mutate(ctx, "run-old", func(r *kc.Record) error { r.NextAction = "upgraded"; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if rec.Prev != at || rec.Schema != kc.Schema {
		t.Fatalf("the first write: prev %d schema %d, want prev %d schema %d", rec.Prev, rec.Schema, at, kc.Schema)
	}
	if _, err := f.kv.Update(ctx, "run-old", old, rev); err != nil {
		t.Fatal(err)
	}
	if _, _, err := checked.Load(ctx, "run-old"); !errors.Is(err, kc.ErrRolledBack) {
		t.Fatalf("Load of the unchained record put back above the seal = %v, want ErrRolledBack", err)
	}
}

// signedAsSchema5 is a record of run as the release before chained records stored it
// (schema 5, no prev), signed by sg.
func signedAsSchema5(t *testing.T, sg *identity.Signer, run string) []byte {
	t.Helper()
	r := newRecord(run)
	r.Epoch = testEpoch
	b, err := kc.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	b = resealed(t, b, func(m map[string]json.RawMessage) {
		m["schema"] = json.RawMessage("5")
		delete(m, "prev")
	})
	m := members(t, b)
	var sum string
	if err := json.Unmarshal(m["sum"], &sum); err != nil {
		t.Fatal(err)
	}
	sig := sg.Sign(identity.DomainRecord, []byte(sum))
	m["sig"], _ = json.Marshal(map[string]string{"by": sig.By, "sig": sig.Sig})
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
