package lease_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/lease"
)

// The fast takeover: a worker sent a step finds another's lease on it, and releases it only
// once that owner's inbox has answered "no responders" twice. The old holder, if it ever
// wakes, is fenced.
func ExampleTakeover_ReleaseGone() {
	dir, _ := os.MkdirTemp("", "lease-example")
	defer os.RemoveAll(dir)
	ns, _ := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	ns.Start()
	defer ns.Shutdown()
	ns.ReadyForConnections(10 * time.Second)
	ctx := context.Background()
	connect := func() (*nats.Conn, jetstream.JetStream) { // one process's connection
		nc, _ := nats.Connect(ns.ClientURL())
		js, _ := jetstream.New(nc)
		return nc, js
	}
	ncA, jsA := connect()
	defer ncA.Close()
	assets.Ensure(ctx, jsA, assets.Config{Steps: []string{"post"}})
	storeA, _ := kc.Open(ctx, jsA, kc.Bucket)
	storeA.Create(ctx, kc.New("run-7", kc.StringParams(false, "date", "2026-10-13"), []string{"post"}, "2026-10-13T22:00:00Z"))

	// Worker a answers on its inbox from before it takes the lease.
	a := lease.NewOwner(assets.Default, "post")
	stopA, _ := lease.Answer(ncA, a)
	rec, rev, _ := storeA.Load(ctx, "run-7")
	held, _ := storeA.Take(ctx, rec, rev, a, "post", func(r *kc.Record) { r.Step("post").Status = kc.InProgress })

	ncB, jsB := connect()
	defer ncB.Close()
	storeB, _ := kc.Open(ctx, jsB, kc.Bucket)
	b := lease.NewOwner(assets.Default, "post")
	t := &lease.Takeover{JS: jsB, Space: assets.Default, Store: storeB, Source: "/cairn/post", Gap: 10 * time.Millisecond,
		Now: func() time.Time { return time.Date(2026, 10, 13, 22, 1, 0, 0, time.UTC) },
		Publish: func(_ context.Context, runID, step string, _ int, rev uint64) error {
			fmt.Println("step event again:", runID, step, "revision", rev)
			return nil
		}}
	rec, rev, _ = storeB.Load(ctx, "run-7")
	_, err := storeB.Take(ctx, rec, rev, b, "post", nil)
	fmt.Println("b takes:", errors.Is(err, kc.ErrLeaseHeld))
	released, _ := t.ReleaseGone(ctx, "run-7", *rec.Lease)
	fmt.Println("released while a answers:", released)

	stopA() // a's process dies
	ncA.Flush()
	released, _ = t.ReleaseGone(ctx, "run-7", *rec.Lease)
	fmt.Println("released once a is gone:", released)

	rec, rev, _ = storeB.Load(ctx, "run-7")
	hb, _ := storeB.Take(ctx, rec, rev, b, "post", nil)
	fmt.Println("b's token:", hb.Token(), "a's token:", held.Token())
	fmt.Println("a renews:", errors.Is(held.Renew(ctx), kc.ErrFenced))
	// Output:
	// b takes: true
	// released while a answers: false
	// step event again: run-7 post revision 3
	// released once a is gone: true
	// b's token: 3 a's token: 1
	// a renews: true
}

// The supervisor judges a lease by how long its mark has stood unchanged, on its own clock.
func ExampleExpiry() {
	e := lease.Expiry{Heartbeat: lease.DefaultHeartbeat, Lease: lease.DefaultLease}
	for _, unchanged := range []time.Duration{4 * time.Second, 11 * time.Second, 15 * time.Second} {
		fmt.Printf("unchanged %v: overdue %t, expired %t\n", unchanged, e.Overdue(unchanged), e.Expired(unchanged))
	}
	// Output:
	// unchanged 4s: overdue false, expired false
	// unchanged 11s: overdue true, expired false
	// unchanged 15s: overdue false, expired true
}
