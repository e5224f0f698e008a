package saga_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/idempotency"
	"github.com/cairnhq/cairn/pkg/saga"
)

// A writing step records each effect's intent before it writes and its outcome after. After
// a crash between a write and its outcome, the restart sees the write left open and is
// refused a payload other than the one first intended; an undo reverses the effects newest
// step first.
func Example() {
	dir, _ := os.MkdirTemp("", "saga-example")
	defer os.RemoveAll(dir)
	ns, _ := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	ns.Start()
	defer ns.Shutdown()
	ns.ReadyForConnections(10 * time.Second)
	nc, _ := nats.Connect(ns.ClientURL())
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	steps := []string{"post", "notify"}
	assets.Ensure(ctx, js, assets.Config{Steps: steps})

	now := time.Date(2026, 10, 13, 22, 30, 0, 0, time.UTC)
	record := func(step, key, region, payload string, reverse saga.Reverse, done bool) {
		intent := saga.Record{Key: key, RunID: "run-7", Step: step, Token: 4, Phase: saga.Intent, Attrs: map[string]string{"region": region},
			Payload: json.RawMessage(payload), Digest: idempotency.Digest([]byte(payload)), Reverse: &reverse}
		saga.Publish(ctx, js, "/cairn/"+step, now, intent)
		if done { // the write landed: its outcome follows
			out := intent
			out.Phase, out.Outcome = saga.Outcome, "done"
			saga.Publish(ctx, js, "/cairn/"+step, now, out)
		}
	}
	record("post", "run-7:row-1", "north", "120.00", saga.Reverse{System: "ledger", Key: "run-7:row-1:rev", Payload: json.RawMessage("-120.00")}, true)
	record("post", "run-7:row-2", "south", "80.00", saga.Reverse{System: "ledger", Key: "run-7:row-2:rev", Payload: json.RawMessage("-80.00")}, false) // the process dies here
	record("notify", "run-7:mail-1", "north", `"Total: 120.00"`, saga.Reverse{System: saga.Mail, Key: "run-7:mail-1:withdraw", Payload: json.RawMessage("{}")}, true)

	tally, _ := saga.ReadTally(ctx, js, assets.Default, nil, "run-7", "post", 0)
	fmt.Println("writes left open:", tally.Open())
	again := saga.Record{Key: "run-7:row-2", Digest: idempotency.Digest([]byte("75.00"))}
	fmt.Println("restart writes row-2 with 75.00:", errors.Is(tally.First.Refuses(again), idempotency.ErrConflict))

	effects, _, _ := saga.Effects(ctx, js, assets.Default, nil, "run-7")
	for _, e := range saga.Plan(effects, steps, saga.Scope{}) {
		fmt.Printf("undo %s: %s %s (outcome %q)\n", e.Intent.Key, e.Intent.Reverse.System, e.Intent.Reverse.Key, e.Outcome)
	}
	north := saga.Plan(effects, steps, saga.Scope{Where: map[string]string{"region": "north"}, Step: "post"})
	fmt.Println("undo of post in the north:", len(north), north[0].Intent.Key)
	// Output:
	// writes left open: 1
	// restart writes row-2 with 75.00: true
	// undo run-7:mail-1: mail run-7:mail-1:withdraw (outcome "done")
	// undo run-7:row-2: ledger run-7:row-2:rev (outcome "")
	// undo run-7:row-1: ledger run-7:row-1:rev (outcome "done")
	// undo of post in the north: 1 run-7:row-1
}
