package bench

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

func groupBucket(t *testing.T) (jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	s, err := embedded(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	nc, js, err := connect(s, "group-commit-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	kv, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: "g", History: 16})
	if err != nil {
		t.Fatal(err)
	}
	return js, kv
}

// created creates keys k0… with the value "new" and returns their revisions.
func created(t *testing.T, kv jetstream.KeyValue, n int) []uint64 {
	t.Helper()
	revs := make([]uint64, n)
	for i := range revs {
		var err error
		if revs[i], err = kv.Create(context.Background(), fmt.Sprintf("k%d", i), []byte("new")); err != nil {
			t.Fatal(err)
		}
	}
	return revs
}

// started is a committer whose first batch is the writes of queued, running until the test ends.
func started(t *testing.T, js jetstream.JetStream, kv jetstream.KeyValue, revs []uint64) (*groupCommitter, []chan groupResult) {
	t.Helper()
	g, err := newGroupCommitter(context.Background(), js, "g", kv, 16)
	if err != nil {
		t.Fatal(err)
	}
	res := queued(t, g, revs)
	go g.loop()
	t.Cleanup(g.stop)
	return g, res
}

// queued puts n writes (key k0…, value v<i>) in the committer's queue before it runs, so that
// its first batch takes them all; it returns their results' channels.
func queued(t *testing.T, g *groupCommitter, revs []uint64) []chan groupResult {
	t.Helper()
	out := make([]chan groupResult, len(revs))
	for i, rev := range revs {
		out[i] = make(chan groupResult, 1)
		g.reqs <- &groupWrite{key: fmt.Sprintf("k%d", i), value: []byte(fmt.Sprintf("v%d", i)), rev: rev, res: out[i]}
	}
	return out
}

// Writes waiting together are committed as one batch, each at the revision the bucket gives it.
func TestGroupCommitOneBatchForTheWaitingWrites(t *testing.T) {
	ctx := context.Background()
	js, kv := groupBucket(t)
	revs := created(t, kv, 5)
	g, res := started(t, js, kv, revs)
	for i, c := range res {
		r := <-c
		if r.err != nil {
			t.Fatalf("write %d: %v", i, r.err)
		}
		e, err := kv.Get(ctx, fmt.Sprintf("k%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if e.Revision() != r.rev || string(e.Value()) != fmt.Sprintf("v%d", i) {
			t.Errorf("k%d: stored %q at %d, committer said %d", i, e.Value(), e.Revision(), r.rev)
		}
	}
	if g.batches.Load() != 1 || g.meanBatch() != 5 {
		t.Errorf("%d batches, mean %.1f: want the 5 writes in one", g.batches.Load(), g.meanBatch())
	}
	// A write alone is a plain update, and the revisions given hold for the next write.
	rev, err := g.update(ctx, "k0", []byte("again"), mustRev(t, kv, "k0"))
	if err != nil || rev != mustRev(t, kv, "k0") {
		t.Errorf("single write: revision %d, %v", rev, err)
	}
}

// One stale expectation refuses the whole batch: no write of it is stored, and each is told.
func TestGroupCommitStaleExpectationRefusesTheBatch(t *testing.T) {
	ctx := context.Background()
	js, kv := groupBucket(t)
	revs := created(t, kv, 3)
	if _, err := kv.Put(ctx, "k1", []byte("moved on")); err != nil {
		t.Fatal(err)
	}
	_, res := started(t, js, kv, revs)
	for i, c := range res {
		if r := <-c; r.err == nil || !strings.Contains(r.err.Error(), "refused") {
			t.Errorf("write %d: %v, want the batch refused", i, r.err)
		}
	}
	for i, want := range []string{"new", "moved on", "new"} {
		if e, err := kv.Get(ctx, fmt.Sprintf("k%d", i)); err != nil || string(e.Value()) != want {
			t.Errorf("k%d after the refused batch: %v, want %q", i, err, want)
		}
	}
}

func mustRev(t *testing.T, kv jetstream.KeyValue, key string) uint64 {
	t.Helper()
	e, err := kv.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return e.Revision()
}
