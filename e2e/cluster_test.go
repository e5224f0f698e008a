package e2e

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/devproc"
	"github.com/cairnhq/cairn/internal/service"
	"github.com/cairnhq/cairn/pkg/assets"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// cluster is three nats-servers, embedded in the test process, clustered with JetStream on
// loopback ports fixed up front, so a node stopped can start again on the same ports and
// storage and rejoin.
type cluster struct {
	t       *testing.T
	name    []string
	client  []int // client ports
	route   []int // cluster ports
	store   []string
	srv     []*server.Server
	routes  []*url.URL
	clients []string // client URLs, for CAIRN_NATS_URL
}

// newCluster starts three nodes and waits until JetStream has a meta leader. Every port it
// takes is added to taken, so no service gets one for its metrics.
func newCluster(t *testing.T, taken map[string]bool) *cluster {
	t.Helper()
	c := &cluster{t: t}
	t.Cleanup(func() {
		for i := range c.srv {
			c.stop(i)
		}
	})
	// A port is chosen free and closed before its server binds it; another process may take
	// it meanwhile, and that node then does not start. The cluster is then started again on
	// new ports and storage.
	var err error
	for try := 1; try <= 3; try++ {
		if err = c.startAll(filepath.Join(t.TempDir(), fmt.Sprintf("try%d", try)), taken); err == nil {
			break
		}
		for i := range c.srv {
			c.stop(i)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if !poll(30*time.Second, func() bool { return c.metaLeader() != "" }) {
		t.Fatal("the cluster elected no JetStream meta leader within 30s")
	}
	return c
}

// startAll chooses the three nodes' ports and storage under base and starts them.
func (c *cluster) startAll(base string, taken map[string]bool) error {
	c.name, c.client, c.route, c.store, c.routes, c.clients = nil, nil, nil, nil, nil, nil
	for i := range 3 {
		c.name = append(c.name, fmt.Sprintf("n%d", i+1))
		c.client = append(c.client, freeClusterPort(c.t, taken))
		c.route = append(c.route, freeClusterPort(c.t, taken))
		c.store = append(c.store, filepath.Join(base, c.name[i]))
		c.routes = append(c.routes, &url.URL{Scheme: "nats", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(c.route[i]))})
		c.clients = append(c.clients, "nats://"+net.JoinHostPort("127.0.0.1", strconv.Itoa(c.client[i])))
	}
	c.srv = make([]*server.Server, 3)
	for i := range 3 {
		if err := c.tryStart(i); err != nil {
			return err
		}
	}
	return nil
}

// freeClusterPort is a loopback port free at the moment and not in taken; it is added to taken.
func freeClusterPort(t *testing.T, taken map[string]bool) int {
	t.Helper()
	for {
		addr, err := freeAddr()
		if err != nil {
			t.Fatal(err)
		}
		if taken[addr] {
			continue
		}
		taken[addr] = true
		_, p, _ := net.SplitHostPort(addr)
		port, _ := strconv.Atoi(p)
		return port
	}
}

// url is CAIRN_NATS_URL for the whole cluster.
func (c *cluster) url() string { return strings.Join(c.clients, ",") }

// start starts node i on its ports and storage (as the production configuration does,
// with sync_interval: always) and waits until it takes clients.
func (c *cluster) start(i int) {
	c.t.Helper()
	if err := c.tryStart(i); err != nil {
		c.t.Fatal(err)
	}
}

// tryStart is start, saying why a node did not start.
func (c *cluster) tryStart(i int) error {
	s, err := server.NewServer(&server.Options{
		ServerName: c.name[i], Host: "127.0.0.1", Port: c.client[i], JetStream: true, StoreDir: c.store[i],
		SyncAlways: true, NoSigs: true, NoLog: true, Routes: c.routes,
		Cluster: server.ClusterOpts{Name: "cairn-e2e", Host: "127.0.0.1", Port: c.route[i]},
	})
	if err != nil {
		return fmt.Errorf("nats-server %s: %w", c.name[i], err)
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		return fmt.Errorf("nats-server %s not ready within 30s (ports %d and %d)", c.name[i], c.client[i], c.route[i])
	}
	c.srv[i] = s
	return nil
}

// stop shuts node i down and waits until it has.
func (c *cluster) stop(i int) {
	if c.srv[i] == nil {
		return
	}
	c.srv[i].Shutdown()
	c.srv[i].WaitForShutdown()
	c.srv[i] = nil
}

// metaLeader is the name of the running node that leads JetStream's meta group, or "".
func (c *cluster) metaLeader() string {
	for i, s := range c.srv {
		if s != nil && s.JetStreamIsLeader() {
			return c.name[i]
		}
	}
	return ""
}

// index is the position of the node named name.
func (c *cluster) index(name string) int {
	c.t.Helper()
	i := slices.Index(c.name, name)
	if i < 0 {
		c.t.Fatalf("no node named %q in %v", name, c.name)
	}
	return i
}

// clusterStreamInfo reads a stream's info, retrying while the cluster elects.
func clusterStreamInfo(js jetstream.JetStream, name string, limit time.Duration) (*jetstream.StreamInfo, error) {
	var info *jetstream.StreamInfo
	var last error
	ok := poll(limit, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, name)
		if err == nil {
			info, err = s.Info(ctx)
		}
		last = err
		return err == nil && info.Cluster != nil && info.Cluster.Leader != ""
	})
	if !ok {
		return nil, fmt.Errorf("stream %s has no leader within %s (last error %v)", name, limit, last)
	}
	return info, nil
}

// leader is the node that leads the stream now.
func (c *cluster) leader(js jetstream.JetStream, stream string) int {
	c.t.Helper()
	info, err := clusterStreamInfo(js, stream, time.Minute)
	if err != nil {
		c.t.Fatal(err)
	}
	return c.index(info.Cluster.Leader)
}

// waitLeaderBut waits until the stream has a leader other than the node named gone.
func (c *cluster) waitLeaderBut(js jetstream.JetStream, stream, gone string) string {
	c.t.Helper()
	var leader string
	ok := poll(time.Minute, func() bool {
		info, err := clusterStreamInfo(js, stream, 5*time.Second)
		if err != nil {
			return false
		}
		leader = info.Cluster.Leader
		return leader != gone
	})
	if !ok {
		c.t.Fatalf("stream %s elected no leader besides %s within a minute", stream, gone)
	}
	return leader
}

// waitCurrent waits until every replica of each stream is current (the restarted node has
// caught up), so the next shutdown leaves a quorum that holds every write.
func (c *cluster) waitCurrent(js jetstream.JetStream, streams ...string) {
	c.t.Helper()
	for _, name := range streams {
		var last string
		ok := poll(time.Minute, func() bool {
			info, err := clusterStreamInfo(js, name, 5*time.Second)
			if err != nil {
				last = err.Error()
				return false
			}
			if len(info.Cluster.Replicas) != 2 {
				last = fmt.Sprintf("%d replicas besides the leader", len(info.Cluster.Replicas))
				return false
			}
			for _, r := range info.Cluster.Replicas {
				if !r.Current || r.Offline {
					last = fmt.Sprintf("replica %s current=%v offline=%v lag=%d", r.Name, r.Current, r.Offline, r.Lag)
					return false
				}
			}
			return true
		})
		if !ok {
			c.t.Fatalf("stream %s: a replica is not current within a minute: %s", name, last)
		}
	}
}

// newClusterNight generates the night, starts a 3-node cluster and runs `cairn init` with
// CAIRN_REPLICAS=3. It starts no service.
func newClusterNight(t *testing.T) (*procsNight, *cluster) {
	t.Helper()
	n := newNight(t, 0)
	h := &procsNight{night: n, metrics: map[*devproc.Proc]string{}, count: map[string]int{}, ports: map[string]bool{}}
	c := newCluster(t, h.ports)
	n.url = c.url()
	t.Cleanup(h.cleanup) // runs before the cluster's own cleanup: the services stop first
	// cairn init creates every stream and bucket with three replicas, each a request its
	// client gives a few seconds; the three race-built nodes live in the test process, and
	// when every parallel test starts at once (see TestMain) a creation can take longer. So
	// it runs again, as an operator would (it creates what is missing), until it succeeds
	// within the limit.
	var out []byte
	var err error
	if !poll(2*time.Minute, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, cairnBin, "init")
		cmd.Env = h.env("CAIRN_REPLICAS=3")
		out, err = cmd.CombinedOutput()
		return err == nil
	}) {
		t.Fatalf("cairn init: %v\n%s", err, out)
	}
	h.nc, err = nats.Connect(n.url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if h.js, err = jetstream.New(h.nc); err != nil {
		t.Fatal(err)
	}
	return h, c
}

// pollRecord reads the run's checkpoint every 100ms until ok holds for it. Unlike a watch,
// it survives the test's own connection moving to another node.
func (h *procsNight) pollRecord(limit time.Duration, what string, ok func(*kc.Record) bool) *kc.Record {
	h.t.Helper()
	var last *kc.Record
	var lastErr error
	done := poll(limit, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		kv, err := h.js.KeyValue(ctx, assets.BucketRuns)
		if err != nil {
			lastErr = err
			return false
		}
		e, err := kv.Get(ctx, runID)
		if err != nil {
			lastErr = err
			return false
		}
		r, err := kc.Decode(e.Value())
		if err != nil {
			h.t.Fatal(err)
		}
		last = r
		if r.Status == kc.HandedOver {
			h.t.Fatalf("the run was handed over while waiting for %s: %s; steps %s", what, r.NextAction, stepProgress(r))
		}
		return ok(r)
	})
	if !done {
		if last != nil {
			h.dumpStuck(last)
		}
		h.t.Fatalf("the run's record did not show %s within %s; last record: %+v (last error %v)", what, limit, last, lastErr)
	}
	return last
}

func stepStatusIs(step string, st kc.StepStatus) func(*kc.Record) bool {
	return func(r *kc.Record) bool { return r.Step(step).Status == st }
}

// everyStream is every stream behind Cairn's assets.
var everyStream = []string{assets.StreamRuns, assets.StreamSteps, assets.StreamSaga, assets.StreamOutbox, assets.StreamAudit,
	assets.StreamRejected, "KV_" + assets.BucketRuns, "KV_" + assets.BucketMemo, "KV_" + assets.BucketHandovers,
	"KV_" + assets.BucketOutbox, "KV_" + assets.BucketNaturalKeys, "KV_" + assets.BucketLimits, "OBJ_" + assets.ObjectArtifacts}

// The reference night on a 3-node cluster with every asset at three replicas: the leader
// of CAIRN_STEPS is shut down in the middle of the night and restarted later, then the
// leader of the cairn-runs bucket. The night equals the ground truth, and since the truth
// counts every ledger row, stock adjustment and mail (and the sender counts its deliveries),
// no outside effect exists twice.
//
// The second node is down while the books are written and comes back, still catching up, as
// debit-notes queues the mail: a consumer that the server places on a node still catching up
// reads a stale stream, and the outbox and the saga are read through such consumers
// (events.ReadSubject), which therefore read on until the stream leader's last message.
func TestClusterLeadersFail(t *testing.T) {
	t.Parallel() // mostly waiting for elections (once 15 s, once 147 s here): see TestMain
	h, c := newClusterNight(t)
	for _, name := range everyStream {
		info, err := clusterStreamInfo(h.js, name, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if info.Config.Replicas != 3 {
			t.Fatalf("stream %s has %d replicas after cairn init with CAIRN_REPLICAS=3", name, info.Config.Replicas)
		}
	}
	names := service.Services()
	ps := h.svcs(names, "CAIRN_REPLICAS=3")
	sender := ps[slices.Index(names, "outbox-sender")]
	h.startRun()

	h.pollRecord(runLimit, "fetch verified", stepStatusIs("fetch", kc.Verified))
	steps := c.leader(h.js, assets.StreamSteps)
	c.stop(steps)
	t.Logf("stopped %s, the leader of %s", c.name[steps], assets.StreamSteps)
	t.Logf("%s now led by %s", assets.StreamSteps, c.waitLeaderBut(h.js, assets.StreamSteps, c.name[steps]))
	h.pollRecord(runLimit, "extract verified", stepStatusIs("extract", kc.Verified))
	c.start(steps)
	// The next shutdown must leave a quorum that holds every checkpoint and step event.
	c.waitCurrent(h.js, assets.StreamSteps, "KV_"+assets.BucketRuns)

	runs := c.leader(h.js, "KV_"+assets.BucketRuns)
	r := h.pollRecord(runLimit, "the record", func(*kc.Record) bool { return true })
	c.stop(runs)
	t.Logf("stopped %s, the leader of KV_%s, with the run at %s", c.name[runs], assets.BucketRuns, stepProgress(r))
	t.Logf("KV_%s now led by %s", assets.BucketRuns, c.waitLeaderBut(h.js, "KV_"+assets.BucketRuns, c.name[runs]))
	h.pollRecord(runLimit, "debit-notes started", func(r *kc.Record) bool { return r.Step("debit-notes").Status != kc.Pending })
	c.start(runs)

	h.pollRecord(runLimit, "done", func(r *kc.Record) bool { return r.Status == kc.Done })
	h.assertTruth()
	// The mail folder keeps one file per key whatever happens; the sender's count says each
	// message was handed to the outside system once.
	mails := float64(len(h.truth.DebitNotes) + 1)
	sent := h.waitMetric(sender, `cairn_outbox_messages_total{outcome="sent"}`, func(v float64) bool { return v >= mails }, 30*time.Second)
	if sent != mails {
		t.Errorf("the outbox sender handed %v messages to the mail system, want %v (each once)", sent, mails)
	}
	// Both restarted nodes rejoined and caught up.
	c.waitCurrent(h.js, everyStream...)
}

// stepProgress is each step's status, in pipeline order.
func stepProgress(r *kc.Record) string {
	var b strings.Builder
	for _, s := range r.Pipeline {
		fmt.Fprintf(&b, "%s=%s ", s, r.Step(s).Status)
		if e := r.Step(s).LastError; e != nil && *e != "" {
			fmt.Fprintf(&b, "(last error: %s) ", *e)
		}
	}
	return strings.TrimSpace(b.String())
}
