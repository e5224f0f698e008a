package kvcheckpoint_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/natstest"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// testEpoch is the epoch the test bucket carries in its stream metadata.
const testEpoch = "e1"

// pipeline is the reference job's pipeline (DESIGN.md, "The checkpoint record").
var pipeline = []string{"fetch", "extract", "match", "compare", "post-ledger", "update-stock", "debit-notes", "report"}

// fixture is an embedded nats-server with the cairn-runs bucket as cairn init makes it, and a
// Store opened on it.
type fixture struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	kv    jetstream.KeyValue
	store *kc.Store
}

func setup(t testing.TB) *fixture {
	t.Helper()
	js := natstest.JetStream(t)
	ctx := testContext(t)
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: kc.Bucket, History: 16, Metadata: map[string]string{kc.EpochKey: testEpoch},
	})
	if err != nil {
		t.Fatalf("creating bucket: %v", err)
	}
	store, err := kc.Open(ctx, js, kc.Bucket)
	if err != nil {
		t.Fatalf("opening store: %v", err)
	}
	return &fixture{nc: js.Conn(), js: js, kv: kv, store: store}
}

// testContext bounds every call of a test, so a hang fails instead of blocking the run.
func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newRecord(runID string) *kc.Record {
	return kc.New(runID, kc.StringParams(false, "warehouse", "ldh", "date", "2026-10-13"), pipeline, "2026-10-13T22:00:03Z")
}

// created writes a fresh record for runID and returns it as loaded, with its revision.
func (f *fixture) created(t *testing.T, runID string) (*kc.Record, uint64) {
	t.Helper()
	ctx := testContext(t)
	rev, err := f.store.Create(ctx, newRecord(runID))
	if err != nil {
		t.Fatalf("Create(%q): %v", runID, err)
	}
	rec, lrev, err := f.store.Load(ctx, runID)
	if err != nil {
		t.Fatalf("Load(%q): %v", runID, err)
	}
	if lrev != rev {
		t.Fatalf("Load(%q) revision = %d, Create returned %d", runID, lrev, rev)
	}
	return rec, rev
}

// load returns the latest record and revision, failing the test on an error.
func (f *fixture) load(t *testing.T, runID string) (*kc.Record, uint64) {
	t.Helper()
	rec, rev, err := f.store.Load(testContext(t), runID)
	if err != nil {
		t.Fatalf("Load(%q): %v", runID, err)
	}
	return rec, rev
}

// take takes the lease of step on the latest record as owner.
func (f *fixture) take(t *testing.T, runID, step string, owner kc.Owner) *kc.Holder {
	t.Helper()
	rec, rev := f.load(t, runID)
	h, err := f.store.Take(testContext(t), rec, rev, owner, step, func(r *kc.Record) {
		r.Step(step).Status = kc.InProgress
	})
	if err != nil {
		t.Fatalf("Take(%q, %q) as %s: %v", runID, step, owner.Name, err)
	}
	return h
}

var (
	ownerA = kc.Owner{Name: "post-ledger/host-7/4120", Inbox: "cairn.owner.post-ledger.A"}
	ownerB = kc.Owner{Name: "post-ledger/host-8/4188", Inbox: "cairn.owner.post-ledger.B"}
)
