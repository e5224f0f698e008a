package kvcheckpoint_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// A worker takes a step's lease, commits, and a stale worker that read the same revision is
// refused; the holder of an older lease is fenced.
func ExampleStore_Take() {
	dir, _ := os.MkdirTemp("", "kvcheckpoint-example")
	defer os.RemoveAll(dir)
	ns, _ := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	ns.Start()
	defer ns.Shutdown()
	ns.ReadyForConnections(10 * time.Second)
	nc, _ := nats.Connect(ns.ClientURL())
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: kc.Bucket, History: 16, Metadata: map[string]string{kc.EpochKey: "e1"}})
	store, _ := kc.Open(ctx, js, kc.Bucket)

	store.Create(ctx, kc.New("run-1", kc.StringParams(false, "warehouse", "ldh", "date", "2026-10-13"), []string{"fetch", "extract"}, "2026-10-13T22:00:03Z"))
	rec, rev, _ := store.Load(ctx, "run-1")
	fmt.Println("created at revision", rev)

	a := kc.Owner{Name: "fetch/host-1/41", Inbox: "cairn.owner.fetch.a"}
	h, _ := store.Take(ctx, rec, rev, a, "fetch", func(r *kc.Record) { r.Step("fetch").Status = kc.InProgress })
	fmt.Println("token", h.Token())

	// Another worker that read the same revision loses the compare-and-set.
	b := kc.Owner{Name: "fetch/host-2/77", Inbox: "cairn.owner.fetch.b"}
	_, err := store.Take(ctx, rec, rev, b, "fetch", nil)
	fmt.Println("second take:", errors.Is(err, kc.ErrConflict))

	// The supervisor finds the lease expired and releases it; b takes it with a larger token.
	store.Mutate(ctx, "run-1", func(r *kc.Record) error { r.Lease = nil; return nil })
	rec, rev, _ = store.Load(ctx, "run-1")
	hb, _ := store.Take(ctx, rec, rev, b, "fetch", nil)
	fmt.Println("new token", hb.Token())

	// a wakes up: its heartbeat is fenced, and it writes nothing more.
	fmt.Println("old holder renews:", errors.Is(h.Renew(ctx), kc.ErrFenced))

	// b commits: verified and the lease released in one write.
	hb.Release(ctx, func(r *kc.Record) error { r.Step("fetch").Status = kc.Verified; return nil })
	rec, _, _ = store.Load(ctx, "run-1")
	fmt.Println("fetch", rec.Step("fetch").Status, "lease", rec.Lease)
	// Output:
	// created at revision 1
	// token 1
	// second take: true
	// new token 3
	// old holder renews: true
	// fetch verified lease <nil>
}
