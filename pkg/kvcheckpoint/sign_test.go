package kvcheckpoint_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/cairnhq/cairn/pkg/identity"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// signers makes a signer for each name and the ring of their public keys.
func signers(t *testing.T, seal identity.Seal, names ...string) (map[string]*identity.Signer, *identity.Ring) {
	t.Helper()
	out := map[string]*identity.Signer{}
	pubs := map[string]string{}
	for _, n := range names {
		seed, err := identity.NewSeed()
		if err != nil {
			t.Fatal(err)
		}
		sg, err := identity.NewSigner(n, seed)
		if err != nil {
			t.Fatal(err)
		}
		out[n], pubs[n] = sg, sg.PublicKey()
	}
	return out, identity.NewRing(pubs, seal)
}

// forge writes raw JSON edits of the stored record with a sum that holds (the unkeyed sum
// anyone who may write the bucket can recompute), as the attacker did.
func (f *fixture) forge(t *testing.T, runID string, edit func(m map[string]any)) uint64 {
	t.Helper()
	ctx := testContext(t)
	e, err := f.kv.Get(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	var r kc.Record
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(&r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	b, _ = json.Marshal(m)
	var back kc.Record
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	sig := back.Sig
	out, err := kc.Encode(&back) // the sum recomputed, the signature dropped
	if err != nil {
		t.Fatal(err)
	}
	if sig != nil { // keep the old signature: it no longer covers the sum
		var mm map[string]any
		_ = json.Unmarshal(out, &mm)
		mm["sig"] = map[string]string{"by": sig.By, "sig": sig.Sig}
		out, _ = json.Marshal(mm)
	}
	rev, err := f.kv.Update(ctx, runID, out, e.Revision())
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

func TestSignedRecords(t *testing.T) {
	f := setup(t)
	ctx := testContext(t)
	sgs, ring := signers(t, identity.Seal{}, "supervisor", "post-ledger", "match", "compensator")
	checked, err := kc.Open(ctx, f.js, kc.Bucket, kc.WithRing(ring))
	if err != nil {
		t.Fatal(err)
	}
	sup := checked.As(sgs["supervisor"])

	// The supervisor creates the run: signed, and the signature is readable JSON.
	const run = "run-2026-10-13-ldh"
	if _, err := sup.Create(ctx, newRecord(run)); err != nil {
		t.Fatal(err)
	}
	e, err := f.kv.Get(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	var stored struct {
		Sig *identity.Sig `json:"sig"`
	}
	if err := json.Unmarshal(e.Value(), &stored); err != nil || stored.Sig == nil || stored.Sig.By != "supervisor" || len(stored.Sig.Sig) != 86 {
		t.Fatalf("stored sig = %+v (%v), want the supervisor's signature", stored.Sig, err)
	}
	if _, _, err := checked.Load(ctx, run); err != nil {
		t.Fatalf("Load of the supervisor's record: %v", err)
	}

	// post-ledger's service takes its lease and writes: accepted.
	pl := checked.As(sgs["post-ledger"])
	for _, s := range pipeline[:4] {
		if _, _, err := sup.Mutate(ctx, run, func(r *kc.Record) error { r.Step(s).Status = kc.Verified; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	rec, rev, err := pl.Load(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	h, err := pl.Take(ctx, rec, rev, ownerA, "post-ledger", func(r *kc.Record) { r.Step("post-ledger").Status = kc.InProgress })
	if err != nil {
		t.Fatalf("Take as post-ledger: %v", err)
	}
	if err := h.Write(ctx, func(r *kc.Record) error { r.NextAction = "posting"; return nil }); err != nil {
		t.Fatalf("Write as post-ledger: %v", err)
	}
	if _, _, err := checked.Load(ctx, run); err != nil {
		t.Fatalf("Load of the lease holder's record: %v", err)
	}

	// match's service may not write a record whose lease post-ledger holds, nor one of a
	// step that is not its own.
	if _, _, err := checked.As(sgs["match"]).Mutate(ctx, run, func(r *kc.Record) error { r.NextAction = "match here"; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, _, err := checked.Load(ctx, run); !errors.Is(err, kc.ErrCorrupt) || !errors.Is(err, kc.ErrForged) || !errors.Is(err, identity.ErrNotAllowed) {
		t.Fatalf("Load of match's write over post-ledger's lease = %v, want ErrCorrupt, ErrForged, ErrNotAllowed", err)
	}

	// A forgery: the record edited, its unkeyed sum recomputed, signed by nobody.
	f.forge(t, run, func(m map[string]any) { m["status"] = "running"; m["next_action"] = "forged"; delete(m, "sig") })
	if _, _, err := checked.Load(ctx, run); !errors.Is(err, kc.ErrCorrupt) || !errors.Is(err, identity.ErrUnsigned) {
		t.Fatalf("Load of an unsigned forgery = %v, want ErrCorrupt and ErrUnsigned", err)
	}
	// The same with the last valid signature kept: it does not cover the new sum.
	if _, _, err := sup.Mutate(ctx, run, func(r *kc.Record) error { return nil }); !errors.Is(err, kc.ErrCorrupt) {
		t.Fatalf("Mutate over a forgery = %v, want ErrCorrupt (never written)", err)
	}
	if _, err := f.kv.Put(ctx, run, mustEncodeSigned(t, sgs["supervisor"], run)); err != nil {
		t.Fatal(err)
	}
	f.forge(t, run, func(m map[string]any) { m["next_action"] = "forged" })
	if _, _, err := checked.Load(ctx, run); !errors.Is(err, kc.ErrCorrupt) || !errors.Is(err, identity.ErrBadSignature) {
		t.Fatalf("Load of a forgery carrying an old signature = %v, want ErrCorrupt and ErrBadSignature", err)
	}
	// A signer no one registered.
	stranger, _ := signers(t, identity.Seal{}, "supervisor")
	if _, err := f.kv.Put(ctx, run, mustEncodeSigned(t, stranger["supervisor"], run)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := checked.Load(ctx, run); !errors.Is(err, identity.ErrBadSignature) {
		t.Fatalf("Load of a record signed with an unregistered key = %v, want ErrBadSignature", err)
	}
}

// An unsigned record is accepted at or below the seal (the previous release wrote it) and
// refused above it.
func TestUnsignedRecordsBelowTheSeal(t *testing.T) {
	f := setup(t)
	ctx := testContext(t)
	old, err := f.store.Create(ctx, newRecord("run-old"))
	if err != nil {
		t.Fatal(err)
	}
	sgs, ring := signers(t, identity.Seal{Runs: old}, "supervisor")
	checked, err := kc.Open(ctx, f.js, kc.Bucket, kc.WithRing(ring))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := checked.Load(ctx, "run-old"); err != nil {
		t.Fatalf("Load of an unsigned record at the seal: %v", err)
	}
	// Its first write by the new release signs it.
	sup := checked.As(sgs["supervisor"])
	if _, _, err := sup.Mutate(ctx, "run-old", func(r *kc.Record) error { r.NextAction = "upgraded"; return nil }); err != nil {
		t.Fatal(err)
	}
	if rec, _, err := checked.Load(ctx, "run-old"); err != nil || rec.Sig == nil || rec.Sig.By != "supervisor" {
		t.Fatalf("Load after the first write: %+v, %v; want the supervisor's signature", rec, err)
	}
	if _, err := f.store.Create(ctx, newRecord("run-new")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := checked.Load(ctx, "run-new"); !errors.Is(err, kc.ErrCorrupt) || !errors.Is(err, identity.ErrUnsigned) {
		t.Fatalf("Load of an unsigned record above the seal = %v, want ErrCorrupt and ErrUnsigned", err)
	}
	if err := checked.Check(ctx, &kc.Record{RunID: "x"}, 0); err == nil || !strings.Contains(err.Error(), "not signed") {
		t.Fatalf("Check of an unsigned record read at no revision = %v", err)
	}
}

func mustEncodeSigned(t *testing.T, sg *identity.Signer, run string) []byte {
	t.Helper()
	r := newRecord(run)
	r.Epoch = testEpoch
	b, err := kc.EncodeSigned(r, sg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
