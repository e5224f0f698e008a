package supervisor

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cairnhq/cairn/pkg/identity"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
)

// overreachRun makes a run whose step a is verified (written by the supervisor), then has
// b's service take b's lease and, in the same signed write, replace a's output: a write
// beyond b's part. It returns the supervisor's store and both revisions.
func overreachRun(t *testing.T, f *fixture, runID string) (sup *kc.Store, good, bad uint64, goodDigest string) {
	t.Helper()
	pubs := map[string]string{}
	sgs := map[string]*identity.Signer{}
	for _, n := range []string{"supervisor", "b"} {
		seed, err := identity.NewSeed()
		if err != nil {
			t.Fatal(err)
		}
		sg, err := identity.NewSigner(n, seed)
		if err != nil {
			t.Fatal(err)
		}
		sgs[n], pubs[n] = sg, sg.PublicKey()
	}
	checked, err := kc.Open(f.ctx, f.js, "cairn-runs", kc.WithRing(identity.NewRing(pubs, identity.Seal{})))
	if err != nil {
		t.Fatal(err)
	}
	sup = checked.As(sgs["supervisor"])
	rec := kc.New(runID, ldh, abc.Names(), "2026-10-13T22:00:00Z")
	if _, err := sup.Create(f.ctx, rec); err != nil {
		t.Fatal(err)
	}
	goodDigest = "sha256:aa"
	_, good, err = sup.Mutate(f.ctx, runID, func(r *kc.Record) error {
		r.Step("a").Status = kc.Verified
		r.Step("a").Output = &kc.Output{Inline: json.RawMessage(`{"n":1}`), Digest: goodDigest, Size: 7}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cur, rev, err := checked.Load(f.ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	h, err := checked.As(sgs["b"]).Take(f.ctx, cur, rev, kc.Owner{Name: "b/forged", Inbox: "cairn.owner.b.forged"}, "b", func(r *kc.Record) {
		r.Step("b").Status = kc.InProgress
		r.Step("a").Output = &kc.Output{Inline: json.RawMessage(`{"n":2}`), Digest: "sha256:bb", Size: 7}
	})
	if err != nil {
		t.Fatal(err)
	}
	_, bad = h.Record()
	return sup, good, bad, goodDigest
}

// assertPutBack: the run's record is the one before the overreaching write, handed over by
// the supervisor, and its note names the writer and the part.
func assertPutBack(t *testing.T, f *fixture, sup *kc.Store, runID string, bad uint64, goodDigest string) {
	t.Helper()
	rec, rev, err := sup.Load(f.ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	if rev <= bad || rec.Status != kc.HandedOver || rec.Lease != nil || rec.Sig.By != "supervisor" || rec.Step("a").Output.Digest != goodDigest {
		t.Fatalf("revision %d: status %s, lease %+v, signed by %s, a's output %s; want the record before revision %d put back, handed over, a's output %s",
			rev, rec.Status, rec.Lease, rec.Sig.By, rec.Step("a").Output.Digest, bad, goodDigest)
	}
	e, err := f.notes.Get(f.ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	var note runner.HandoverNote
	if err := json.Unmarshal(e.Value(), &note); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(note.ID, ":handover:overreach:") || !strings.Contains(note.Error, "b changed step a's work") || rec.Handover == nil || *rec.Handover != note.ID {
		t.Fatalf("note %q: %q (record's handover %v); want the overreach named", note.ID, note.Error, rec.Handover)
	}
}

// The watch sees the overreaching write right after the good one: the sweep puts the good
// record back, handed over.
func TestOverreachSeenLiveIsPutBack(t *testing.T) {
	f := setup(t)
	const runID = "run-2026-10-13-ldh"
	sup, good, bad, digest := overreachRun(t, f, runID)
	fs := *f
	fs.store = sup
	s := fs.supervisor(t)
	for _, rev := range []uint64{good, bad} {
		e, err := sup.KV().GetRevision(f.ctx, runID, rev)
		if err != nil {
			t.Fatal(err)
		}
		s.observe(e)
	}
	s.SweepOnce(f.ctx, false)
	assertPutBack(t, f, sup, runID, bad, digest)
}

// A supervisor that starts after the overreaching write (its watch begins at the latest
// record) finds it in the run's kept history and puts the good record back.
func TestOverreachWhileNoSupervisorWatchedIsPutBack(t *testing.T) {
	f := setup(t)
	const runID = "run-2026-10-13-ldh"
	sup, _, bad, digest := overreachRun(t, f, runID)
	fs := *f
	fs.store = sup
	s := fs.supervisor(t)
	fs.observeAll(t, s)
	s.judgeHistory(f.ctx)
	s.SweepOnce(f.ctx, true)
	assertPutBack(t, f, sup, runID, bad, digest)

	// A later start finds the put-back after it: nothing more.
	s2 := fs.supervisor(t)
	fs.observeAll(t, s2)
	s2.judgeHistory(f.ctx)
	if len(s2.over) != 0 {
		t.Fatalf("a second start judged %+v overreached again", s2.over)
	}
}
