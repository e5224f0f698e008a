package supervisor

import (
	"bytes"
	"testing"

	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// newer stores runID's record as a newer release would: a schema this code does not know,
// its lease held by worker (whose process is gone). It returns the bytes stored.
func (f *fixture) newer(t *testing.T, runID string) []byte {
	t.Helper()
	rec := kc.New(runID, ldh, abc.Names(), "2026-10-13T22:00:00Z")
	rec.Schema, rec.Epoch = kc.Schema+1, f.store.Epoch()
	rec.Step("a").Status = kc.InProgress
	rec.Lease = &kc.Lease{Owner: worker.Name, OwnerInbox: worker.Inbox, Token: 1, Step: "a", WriteID: "w-1"}
	b, err := kc.Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.KV().Create(f.ctx, runID, b); err != nil {
		t.Fatal(err)
	}
	return b
}

// unchanged checks that runID's entry is still the bytes a newer release stored.
func (f *fixture) unchanged(t *testing.T, runID string, want []byte) {
	t.Helper()
	e, err := f.store.KV().Get(f.ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	if e.Revision() != 1 || !bytes.Equal(e.Value(), want) {
		t.Fatalf("the newer release's record was written: revision %d\n%s", e.Revision(), e.Value())
	}
	if _, err := f.notes.Get(f.ctx, runID); err == nil {
		t.Fatal("a handover note was written for a run of a newer release")
	}
}

// A run a newer release wrote is left to it: not swept (its dead owner's lease not released,
// no stall handed over) and its commands come back instead of being applied or rejected.
func TestNewerSchemaRunIsLeftToTheNewerRelease(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	stored := f.newer(t, "r1")

	f.observeAll(t, s)
	s.SweepOnce(f.ctx, true)
	f.clock.Advance(testStall + testLease)
	s.SweepOnce(f.ctx, false)
	f.unchanged(t, "r1", stored)
	f.nonePublished(t)

	f.command(t, s, events.RunSubject("r1", events.VerbCancel), `{"request_id":"cancel-1"}`)
	f.unchanged(t, "r1", stored)
	if r := f.rejections(t); len(r) != 0 {
		t.Fatalf("rejections %+v, want the command left for the newer release", r)
	}
	info, err := f.control.Info(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 1 {
		t.Fatalf("control consumer: %d pending ack, want the cancel waiting to come back", info.NumAckPending)
	}
}
