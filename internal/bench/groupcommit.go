package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// groupCommitter commits concurrent compare-and-set writes to one bucket together: one
// goroutine takes what is waiting (up to max) and sends it as one atomic batch
// (Nats-Batch-Id, -Sequence, -Commit, each message with its Nats-Expected-Last-Subject-
// Sequence), or a single write as a plain update. The server checks every expectation at the
// commit and syncs the stream once for the batch. A batch is refused whole when one
// expectation is stale; this measurement has none (each writer owns its key), and any refusal
// fails it.
type groupCommitter struct {
	nc      *nats.Conn
	kv      jetstream.KeyValue
	prefix  string // $KV.<bucket>.
	max     int
	reqs    chan *groupWrite
	done    chan struct{}
	batches atomic.Int64
	writes  atomic.Int64
}

type groupWrite struct {
	key   string
	value []byte
	rev   uint64
	res   chan groupResult
}

type groupResult struct {
	rev uint64
	err error
}

// newGroupCommitter lets the bucket's stream take atomic batches; go loop() starts it.
func newGroupCommitter(ctx context.Context, js jetstream.JetStream, bucket string, kv jetstream.KeyValue, max int) (*groupCommitter, error) {
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, err
	}
	cfg := st.CachedInfo().Config
	cfg.AllowAtomicPublish = true
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return nil, fmt.Errorf("allowing atomic batches on KV_%s: %w", bucket, err)
	}
	g := &groupCommitter{nc: js.Conn(), kv: kv, prefix: "$KV." + bucket + ".", max: max,
		reqs: make(chan *groupWrite, 4*max), done: make(chan struct{})}
	return g, nil
}

func (g *groupCommitter) stop() { close(g.done) }

// update is a compare-and-set of key, committed with whatever else is waiting.
func (g *groupCommitter) update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	w := &groupWrite{key: key, value: value, rev: rev, res: make(chan groupResult, 1)}
	select {
	case g.reqs <- w:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	select {
	case r := <-w.res:
		return r.rev, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func (g *groupCommitter) meanBatch() float64 {
	if b := g.batches.Load(); b > 0 {
		return float64(g.writes.Load()) / float64(b)
	}
	return 0
}

func (g *groupCommitter) loop() {
	var id int
	for {
		var w *groupWrite
		select {
		case w = <-g.reqs:
		case <-g.done:
			return
		}
		group := []*groupWrite{w}
	more:
		for len(group) < g.max {
			select {
			case w := <-g.reqs:
				group = append(group, w)
			default:
				break more
			}
		}
		g.batches.Add(1)
		g.writes.Add(int64(len(group)))
		if len(group) == 1 {
			rev, err := g.kv.Update(context.Background(), w.key, w.value, w.rev)
			w.res <- groupResult{rev, err}
			continue
		}
		id++
		revs, err := g.commit("g"+strconv.Itoa(id), group)
		for i, w := range group {
			if err != nil {
				w.res <- groupResult{err: err}
				continue
			}
			w.res <- groupResult{rev: revs[i]}
		}
	}
}

// commit sends group as one atomic batch and returns each write's revision: the batch's
// messages are stored one after another, the last at the sequence its ack names.
func (g *groupCommitter) commit(id string, group []*groupWrite) ([]uint64, error) {
	var resp *nats.Msg
	for i, w := range group {
		m := nats.NewMsg(g.prefix + w.key)
		m.Data = w.value
		m.Header.Set("Nats-Batch-Id", id)
		m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(w.rev, 10))
		if i < len(group)-1 {
			if err := g.nc.PublishMsg(m); err != nil {
				return nil, err
			}
			continue
		}
		m.Header.Set("Nats-Batch-Commit", "1")
		var err error
		if resp, err = g.nc.RequestMsg(m, 30*time.Second); err != nil {
			return nil, fmt.Errorf("batch %s of %d: %w", id, len(group), err)
		}
	}
	var ack struct {
		Seq   uint64 `json:"seq"`
		Count int    `json:"count"`
		Error *struct {
			Code        int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &ack); err != nil {
		return nil, fmt.Errorf("batch %s: %w", id, err)
	}
	if ack.Error != nil || ack.Count != len(group) || ack.Seq < uint64(len(group)) {
		return nil, fmt.Errorf("batch %s of %d refused: %s", id, len(group), resp.Data)
	}
	revs := make([]uint64, len(group))
	for i := range group {
		revs[i] = ack.Seq - uint64(len(group)-1-i)
	}
	return revs, nil
}
