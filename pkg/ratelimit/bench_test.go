package ratelimit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cairnhq/cairn/pkg/ratelimit"
)

// BenchmarkWait measures what the shared limit adds to a call when a slot is free (a limit
// far above the calls: no waiting for a slot, only the bookings): per instance alone, and
// the grants per second two instances (two connections, two limiters, one key) get
// between them, each booking lost to the other's tried again.
func BenchmarkWait(b *testing.B) {
	l := ratelimit.Limit{Bucket: bucket, Key: "bench", PerSecond: 1e9}
	b.Run("one-instance", func(b *testing.B) {
		ts := setup(b)
		lim := limiter(b, ts.client(), l, ratelimit.Config{})
		ctx := context.Background()
		b.ResetTimer()
		for b.Loop() {
			if _, err := lim.Wait(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("two-instances", func(b *testing.B) {
		ts := setup(b)
		lims := []*ratelimit.Limiter{limiter(b, ts.client(), l, ratelimit.Config{}), limiter(b, ts.client(), l, ratelimit.Config{})}
		ctx := context.Background()
		b.ResetTimer()
		began := time.Now()
		var wg sync.WaitGroup
		for i, lim := range lims {
			n := b.N / 2
			if i == 0 {
				n = b.N - n
			}
			wg.Go(func() {
				for range n {
					if _, err := lim.Wait(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		el := time.Since(began)
		b.ReportMetric(float64(b.N)/el.Seconds(), "grants/s")
		b.ReportMetric(float64(lims[0].Stats().Conflicts+lims[1].Stats().Conflicts)/float64(b.N), "lost/grant")
	})
}
