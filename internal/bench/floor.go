package bench

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/eventually"
)

// FloorConfig says what RawFloor measures.
type FloorConfig struct {
	Runs, Concurrency, Steps int
	SyncAlways               bool
	// Nodes is 1 (default), or 3: a cluster on loopback whose bucket and stream have 3 replicas.
	Nodes     int
	ValueSize int // bytes of each value and message; default 200
	// ValueSizes, when set, are the KV value's sizes: [0] at the create, [s] at transition
	// s (the published message stays ValueSize bytes).
	ValueSizes []int
	Dir        string
	Timeout    time.Duration // default 10m
	// Shape is what each transition writes: the floor's compare-and-set and publish (the
	// default), or one of the ceilings.
	Shape Shape
}

// Shape is what a transition of RawFloor writes.
type Shape int

const (
	// CASAndPublish is the floor: a KV compare-and-set, then a synchronous publish.
	CASAndPublish Shape = iota
	// CASOnly is a KV compare-and-set alone: the most a design paying one synced write a
	// transition (and doing nothing else) could reach on these servers.
	CASOnly
	// GroupCommit is a KV compare-and-set alone, the concurrent ones committed together: the
	// waiting writes (up to C) go as one atomic batch, a single one as a plain update. It is
	// what sharing syncs through the server's atomic batch publish could reach at most.
	GroupCommit
	// CASSharded is a KV compare-and-set alone, the runs spread over Shards buckets (a run's
	// key in one of them): the server syncs each stream's writes one after another, so this
	// is what splitting the checkpoint bucket would reach, the disk syncing several streams
	// at once.
	CASSharded
)

// Shards is how many buckets CASSharded spreads the runs over.
const Shards = 4

// Floor is the raw JetStream floor: what a bare loop doing one KV compare-and-set plus one
// synchronous publish per transition makes on the same server settings.
type Floor struct {
	Transitions int     `json:"transitions"`
	WallSeconds float64 `json:"wall_seconds"`
	PerSecond   float64 `json:"transitions_per_second"`
	CPUMicros   float64 `json:"cpu_us_per_transition"`
	// Batch is the mean size of a group commit's batches, singles included (GroupCommit).
	Batch float64 `json:"mean_batch,omitempty"`
}

// RawFloor runs the bare loop: C workers take runs in turn; a run creates its key, then for
// each of its S transitions updates the key conditioned on the revision it last wrote and
// publishes one message to a stream, waiting for the stream's ack.
func RawFloor(ctx context.Context, c FloorConfig) (Floor, error) {
	c.ValueSize = cmp.Or(c.ValueSize, 200)
	c.Timeout = cmp.Or(c.Timeout, 10*time.Minute)
	f := Floor{Transitions: c.Runs * c.Steps}
	if c.Dir == "" {
		tmp, err := os.MkdirTemp("", "cairn-floor-")
		if err != nil {
			return f, err
		}
		defer os.RemoveAll(tmp)
		c.Dir = tmp
	}
	c.Nodes = cmp.Or(c.Nodes, 1)
	srvs, err := startNodes(c.Dir, c.SyncAlways, c.Nodes)
	if err != nil {
		return f, err
	}
	defer srvs.shutdown()
	nc, js, err := connectURL(srvs.url(), "cairn-bench-floor")
	if err != nil {
		return f, err
	}
	defer nc.Close()
	buckets := 1
	if c.Shape == CASSharded {
		buckets = Shards
	}
	kvs := make([]jetstream.KeyValue, buckets)
	for i := range kvs {
		name := "floor"
		if i > 0 {
			name = fmt.Sprintf("floor-%d", i)
		}
		err = eventually.Within(30*time.Second, func() (err error) {
			kvs[i], err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name, History: 16, Storage: jetstream.FileStorage, Replicas: c.Nodes})
			return err
		})
		if err != nil {
			return f, fmt.Errorf("raw floor bucket %s: %w", name, err)
		}
	}
	kv := kvs[0]
	err = eventually.Within(30*time.Second, func() error {
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FLOOR", Subjects: []string{"floor.>"}, Storage: jetstream.FileStorage, Replicas: c.Nodes})
		return err
	})
	if err != nil {
		return f, fmt.Errorf("raw floor stream: %w", err)
	}
	// A new replicated stream answers "no response from stream" until its leader is elected
	// and serving: the floor starts once the bucket and the stream each took a write.
	err = eventually.Within(30*time.Second, func() error {
		if _, err := kv.Put(ctx, "ready", nil); err != nil {
			return fmt.Errorf("bucket: %w", err)
		}
		_, err := js.Publish(ctx, "floor.ready", nil)
		return err
	})
	if err != nil {
		return f, fmt.Errorf("raw floor not writable: %w", err)
	}
	var write writeFunc // nil: a plain update of the run's bucket
	var gc *groupCommitter
	if c.Shape == GroupCommit {
		if gc, err = newGroupCommitter(ctx, js, "floor", kv, c.Concurrency); err != nil {
			return f, fmt.Errorf("raw floor bucket: %w", err)
		}
		go gc.loop()
		defer gc.stop()
		write = gc.update
	}
	value := []byte(`"` + strings.Repeat("x", max(c.ValueSize-2, 0)) + `"`)
	values := make([][]byte, c.Steps+1)
	for i := range values {
		values[i] = value
		if i < len(c.ValueSizes) {
			values[i] = []byte(`"` + strings.Repeat("x", max(c.ValueSizes[i]-2, 0)) + `"`)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var failed error
	began, cpu := time.Now(), cpuTime()
	for range c.Concurrency {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(c.Runs) || ctx.Err() != nil {
					return
				}
				kv, write := kvs[int(i)%len(kvs)], write
				if write == nil {
					write = kv.Update
				}
				if err := floorRun(ctx, js, kv, write, c.Shape == CASAndPublish, fmt.Sprintf("run-%06d", i), value, values); err != nil {
					once.Do(func() { failed = err; cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	if failed != nil {
		return f, fmt.Errorf("raw floor: %w", failed)
	}
	took := time.Since(began)
	f.CPUMicros = float64((cpuTime() - cpu).Microseconds()) / float64(f.Transitions)
	f.WallSeconds = took.Seconds()
	f.PerSecond = float64(f.Transitions) / took.Seconds()
	if gc != nil {
		f.Batch = gc.meanBatch()
	}
	return f, nil
}

// join is two measurements of the floor as one.
func (f Floor) join(g Floor) Floor {
	j := Floor{Transitions: f.Transitions + g.Transitions, WallSeconds: f.WallSeconds + g.WallSeconds}
	if j.WallSeconds > 0 {
		j.PerSecond = float64(j.Transitions) / j.WallSeconds
	}
	if j.Transitions > 0 {
		j.CPUMicros = (f.CPUMicros*float64(f.Transitions) + g.CPUMicros*float64(g.Transitions)) / float64(j.Transitions)
	}
	return j
}

type writeFunc func(ctx context.Context, key string, value []byte, rev uint64) (uint64, error)

func floorRun(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, write writeFunc, publish bool, key string, msg []byte, values [][]byte) error {
	rev, err := kv.Create(ctx, key, values[0])
	if err != nil {
		return err
	}
	for s := 1; s < len(values); s++ {
		if rev, err = write(ctx, key, values[s], rev); err != nil {
			return err
		}
		if !publish {
			continue
		}
		if _, err := js.Publish(ctx, fmt.Sprintf("floor.s%02d.%s", s, key), msg); err != nil {
			return err
		}
	}
	return nil
}
