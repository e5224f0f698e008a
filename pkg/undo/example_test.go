package undo_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/fence"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/saga"
	"github.com/cairnhq/cairn/pkg/undo"
)

// ledger is the pipeline's outside system "ledger": a reversal is a row under the reversal's
// key, written once.
type ledger struct{ rows map[string]string }

func (l ledger) RaiseFence(_ context.Context, t fence.Token, _ *kc.Record) error {
	fmt.Println("ledger fence raised to token", t.Value)
	return nil
}

func (l ledger) Reverse(_ context.Context, _ fence.Token, _ *kc.Record, e saga.Effect) (bool, error) {
	if _, ok := l.rows[e.Intent.Reverse.Key]; ok {
		return false, nil // reversed already: a repeat is harmless
	}
	l.rows[e.Intent.Reverse.Key] = string(e.Intent.Reverse.Payload)
	fmt.Println("ledger writes", e.Intent.Reverse.Key, l.rows[e.Intent.Reverse.Key])
	return true, nil
}

// An operator's `cairn undo run-7` reaches the compensator, which takes the run's lease,
// raises the ledger's fence and reverses the run's effects newest first; the run is undone.
// Asked again, it finds every reversal made and makes none twice.
func ExampleCompensator_Run() {
	dir, _ := os.MkdirTemp("", "undo-example")
	defer os.RemoveAll(dir)
	ns, _ := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	ns.Start()
	defer ns.Shutdown()
	ns.ReadyForConnections(10 * time.Second)
	nc, _ := nats.Connect(ns.ClientURL())
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	assets.Ensure(ctx, js, assets.Config{Steps: []string{"post"}})
	store, _ := kc.Open(ctx, js, kc.Bucket)

	// Run run-7 posted two rows and is done.
	at := time.Date(2026, 10, 13, 22, 5, 0, 0, time.UTC)
	store.Create(ctx, kc.New("run-7", kc.StringParams(false, "date", "2026-10-13"), []string{"post"}, "2026-10-13T22:00:00Z"))
	store.Mutate(ctx, "run-7", func(r *kc.Record) error { r.Step("post").Status, r.Status = kc.Verified, kc.Done; return nil })
	for _, row := range []struct{ key, amount string }{{"run-7:row-1", "120.00"}, {"run-7:row-2", "80.00"}} {
		intent := saga.Record{Key: row.key, RunID: "run-7", Step: "post", Token: 1, Phase: saga.Intent, Payload: json.RawMessage(row.amount),
			Reverse: &saga.Reverse{System: "ledger", Key: row.key + ":rev", Payload: json.RawMessage("-" + row.amount)}}
		saga.Publish(ctx, js, "/cairn/post", at, intent)
		intent.Phase, intent.Outcome = saga.Outcome, "done"
		saga.Publish(ctx, js, "/cairn/post", at, intent)
	}

	c, _ := undo.New(undo.Config{JS: js, Store: store, Systems: map[string]undo.System{"ledger": ledger{rows: map[string]string{}}}})
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	w, _ := store.KV().Watch(ctx, "run-7")
	defer w.Stop()
	for _, id := range []string{"undo-1", "undo-2"} { // undo-2: the operator asks again
		fmt.Println(id)
		js.Publish(ctx, assets.Default.Run("run-7", "undo"), []byte(`{"request_id":"`+id+`"}`))
		for range w.Updates() {
			rec, _, _ := store.Load(ctx, "run-7")
			if rec != nil && rec.Status == kc.Undone && rec.Undo.RequestID == kc.RequestKey(id) {
				fmt.Printf("run-7 %s: %d of %d effects newly reversed\n", rec.Status, rec.Undo.Reversed, rec.Undo.Total)
				break
			}
		}
	}
	cancel()
	fmt.Println("compensator stopped:", <-done)
	// Output:
	// undo-1
	// ledger fence raised to token 2
	// ledger writes run-7:row-2:rev -80.00
	// ledger writes run-7:row-1:rev -120.00
	// run-7 undone: 2 of 2 effects newly reversed
	// undo-2
	// ledger fence raised to token 6
	// run-7 undone: 0 of 2 effects newly reversed
	// compensator stopped: <nil>
}
