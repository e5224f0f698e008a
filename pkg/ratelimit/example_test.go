package ratelimit_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/ratelimit"
)

// Two instances of a step share a model's declared limit of 5 calls a second, 2 at once:
// the first two calls go at once, and each one after them an interval (200ms) later, whichever
// instance makes it. When the model answers 429 with Retry-After, one instance holds the
// limit for every instance.
func ExampleLimiter_Wait() {
	dir, _ := os.MkdirTemp("", "ratelimit-example")
	defer os.RemoveAll(dir)
	ns, _ := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	ns.Start()
	defer ns.Shutdown()
	ns.ReadyForConnections(10 * time.Second)
	ctx := context.Background()
	limit := ratelimit.Limit{Bucket: "cairn-limits", Key: "model", PerSecond: 5, Burst: 2}
	var instances []*ratelimit.Limiter
	for range 2 {
		nc, _ := nats.Connect(ns.ClientURL())
		defer nc.Close()
		js, _ := jetstream.New(nc)
		js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: limit.Bucket, History: 1}) // cairn init
		lim, _ := ratelimit.New(ctx, ratelimit.Config{JS: js, Limit: limit})
		instances = append(instances, lim)
	}
	fmt.Println(limit.Interval(), "apart; at most", limit.MostIn(time.Second), "calls in any second")

	var first, last time.Time
	for k := 1; k <= 5; k++ {
		g, _ := instances[k%2].Wait(ctx)
		if k == 1 {
			first = g.At
		}
		if n := k - limit.Burst; n > 0 {
			fmt.Printf("call %d (instance %d) at the first's slot + %d×%v or later: %t\n", k, k%2, n, limit.Interval(), g.At.Sub(first) >= time.Duration(n)*limit.Interval())
		}
		last = g.At
	}

	instances[1].Hold(ctx, 500*time.Millisecond) // the model said Retry-After: 0.5
	g, _ := instances[0].Wait(ctx)
	fmt.Println("instance 0 after the hold: at least 500ms after the last call:", g.At.Sub(last) >= 500*time.Millisecond)
	fmt.Println("granted:", instances[0].Stats().Grants, instances[1].Stats().Grants, "holds:", instances[1].Stats().Holds)
	// Output:
	// 200ms apart; at most 7 calls in any second
	// call 3 (instance 1) at the first's slot + 1×200ms or later: true
	// call 4 (instance 0) at the first's slot + 2×200ms or later: true
	// call 5 (instance 1) at the first's slot + 3×200ms or later: true
	// instance 0 after the hold: at least 500ms after the last call: true
	// granted: 3 3 holds: 1
}
