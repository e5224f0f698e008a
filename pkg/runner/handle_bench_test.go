package runner_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/cairnhq/cairn/pkg/assets"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
)

// BenchmarkHandle is the runner's work for one message of a lease-free step, on an embedded
// server with file storage: receive it, decode it, read the record, run the step (a small
// output), commit, publish the next step's event and an audit event, ack.
//
// "read" reads the record from the server, as a step service of its own does; "own-write"
// is a runner sharing its store with the writer that scheduled the step (cairn dev), which
// needs no read.
func BenchmarkHandle(b *testing.B) {
	for _, shared := range []bool{false, true} {
		name := "read"
		if shared {
			name = "own-write"
		}
		b.Run(name, func(b *testing.B) {
			f := setup(b)
			ctx := context.Background()
			c := f.config("two", output("two"))
			if !shared {
				store, err := kc.Open(ctx, f.js, assets.BucketRuns)
				if err != nil {
					b.Fatal(err)
				}
				c.Store = store
			}
			r, err := runner.New(c)
			if err != nil {
				b.Fatal(err)
			}
			for i := range b.N {
				id := fmt.Sprintf("r%d", i)
				f.publishTwo(b, id, f.readyForTwo(b, id))
			}
			cons, err := f.js.Consumer(ctx, assets.StreamSteps, "two")
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				m, err := cons.Next()
				if err != nil {
					b.Fatal(err)
				}
				r.Handle(ctx, m)
			}
			b.StopTimer()
			rec, _, err := f.store.Load(ctx, fmt.Sprintf("r%d", b.N-1))
			if err != nil || rec.Step("two").Status != kc.Verified {
				b.Fatalf("the last run's step two: %v (%v)", rec.Step("two").Status, err)
			}
		})
	}
}
