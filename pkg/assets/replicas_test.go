package assets_test

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/eventually"
	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/pkg/assets"
)

// everyStream is every stream behind the assets: the streams, the buckets' and the object
// store's.
var everyStream = []string{
	"CAIRN_RUNS", "CAIRN_STEPS", "CAIRN_SAGA", "CAIRN_OUTBOX", "CAIRN_AUDIT", "CAIRN_REJECTED",
	"KV_cairn-runs", "KV_cairn-memo", "KV_cairn-handovers", "KV_cairn-outbox-sent", "OBJ_cairn-artifacts",
}

// cluster starts three clustered JetStream servers on loopback for t and returns a
// JetStream handle on a connection to all of them, once JetStream has a meta leader.
func cluster(t *testing.T) jetstream.JetStream {
	t.Helper()
	var ports []int
	var routes []*url.URL
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
		routes = append(routes, &url.URL{Scheme: "nats", Host: l.Addr().String()})
		l.Close()
	}
	var urls []string
	var srvs []*server.Server
	for i, p := range ports {
		s, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
			Cluster: server.ClusterOpts{Name: "assets", Host: "127.0.0.1", Port: p}, Routes: routes, NoLog: true, NoSigs: true,
		})
		if err != nil {
			t.Fatalf("creating nats-server n%d: %v", i+1, err)
		}
		go s.Start()
		t.Cleanup(s.Shutdown)
		if !s.ReadyForConnections(30 * time.Second) {
			t.Fatalf("nats-server n%d not ready", i+1)
		}
		srvs = append(srvs, s)
		urls = append(urls, s.ClientURL())
	}
	leader := func() bool {
		for _, s := range srvs {
			if s.JetStreamIsLeader() {
				return true
			}
		}
		return false
	}
	// The election has no event to wait on from outside the servers: poll, with a deadline.
	eventually.That(t, 30*time.Second, "a JetStream meta leader elected", eventually.True(leader))
	nc, err := nats.Connect(strings.Join(urls, ","))
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return js
}

// ensureEventually is Ensure, retried while the new cluster's JetStream settles (its first
// requests may find no leader yet); a mismatch is never retried.
func ensureEventually(t *testing.T, js jetstream.JetStream, c assets.Config) {
	t.Helper()
	eventually.That(t, 30*time.Second, fmt.Sprintf("Ensure with %d replicas", c.Replicas), func() error {
		err := assets.Ensure(t.Context(), js, c)
		if errors.Is(err, assets.ErrMismatch) {
			t.Fatalf("Ensure with %d replicas: %v", c.Replicas, err)
		}
		return err
	})
}

// CAIRN_REPLICAS=3 on a cluster: every stream, bucket and the object store has three
// replicas, and so has every durable consumer; nothing persists asynchronously.
func TestReplicasOnCluster(t *testing.T) {
	t.Parallel()
	js := cluster(t)
	c := config()
	c.Replicas = 3
	ensureEventually(t, js, c)
	for _, name := range everyStream {
		got := streamConfig(t, js, name)
		if got.Replicas != 3 {
			t.Errorf("stream %s: %d replicas, want 3", name, got.Replicas)
		}
		if got.PersistMode != jetstream.DefaultPersistMode {
			t.Errorf("stream %s: persist mode %v; the server refuses asynchronous persistence on replicated streams", name, got.PersistMode)
		}
	}
	for _, w := range c.Consumers() {
		if got := consumerConfig(t, js, w.Stream, w.Config.Durable); got.Replicas != 3 {
			t.Errorf("consumer %s on %s: %d replicas, want 3", w.Config.Durable, w.Stream, got.Replicas)
		}
	}
	if err := assets.Check(t.Context(), js, c); err != nil {
		t.Fatalf("Check with 3 replicas after Ensure: %v", err)
	}
	// A service started with the default (one replica) finds out at once, naming the field.
	err := assets.Check(t.Context(), js, config())
	if !errors.Is(err, assets.ErrMismatch) {
		t.Fatalf("Check with 1 replica on 3-replica assets = %v, want ErrMismatch", err)
	}
	assertReplicasReported(t, "Check", err, 3, 1)

	// A durable consumer moved to one replica is reported too, and left as it is.
	cc := consumerConfig(t, js, "CAIRN_OUTBOX", "outbox-sender")
	cc.Replicas = 1
	if _, err := js.UpdateConsumer(t.Context(), "CAIRN_OUTBOX", cc); err != nil {
		t.Fatalf("moving the outbox-sender consumer to one replica: %v", err)
	}
	err = assets.Ensure(t.Context(), js, c)
	if !errors.Is(err, assets.ErrMismatch) || !strings.Contains(err.Error(), "consumer outbox-sender on CAIRN_OUTBOX: replicas is 1, want 3") {
		t.Fatalf("Ensure with a one-replica consumer = %v, want ErrMismatch naming its replicas", err)
	}
	if strings.Contains(err.Error(), "stream ") || strings.Contains(err.Error(), "consumer control") {
		t.Errorf("Ensure reports assets that match: %v", err)
	}
	if got := consumerConfig(t, js, "CAIRN_OUTBOX", "outbox-sender").Replicas; got != 1 {
		t.Errorf("Ensure changed the consumer's replicas to %d", got)
	}
}

// assertReplicasReported checks that err reports got replicas where want were configured,
// for every stream, bucket and the object store. (Consumers are compared once their streams
// match.)
func assertReplicasReported(t *testing.T, call string, err error, got, want int) {
	t.Helper()
	assets := []string{"object store cairn-artifacts"}
	for _, name := range everyStream {
		if b, ok := strings.CutPrefix(name, "KV_"); ok {
			assets = append(assets, "bucket "+b)
		} else if !strings.HasPrefix(name, "OBJ_") {
			assets = append(assets, "stream "+name)
		}
	}
	var missing []string
	for _, a := range assets {
		if !strings.Contains(err.Error(), fmt.Sprintf("%s: replicas is %d, want %d (CAIRN_REPLICAS", a, got, want)) {
			missing = append(missing, a)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%s: error %q does not report the replicas of %v", call, err, missing)
	}
}

// Assets made with one replica, then a start with CAIRN_REPLICAS=3: Check and Ensure report
// the replicas of every stream, bucket and the object store, and change none.
func TestReplicasMismatchReported(t *testing.T) {
	t.Parallel()
	js := natstest.JetStream(t)
	ensure(t, js, config())
	c := config()
	c.Replicas = 3
	for _, call := range []struct {
		name string
		f    func() error
	}{
		{"Check", func() error { return assets.Check(t.Context(), js, c) }},
		{"Ensure", func() error { return assets.Ensure(t.Context(), js, c) }},
	} {
		err := call.f()
		if !errors.Is(err, assets.ErrMismatch) {
			t.Fatalf("%s with 3 replicas on 1-replica assets = %v, want ErrMismatch", call.name, err)
		}
		assertReplicasReported(t, call.name, err, 1, 3)
	}
	for _, name := range everyStream {
		if got := streamConfig(t, js, name).Replicas; got != 1 {
			t.Errorf("stream %s: %d replicas after the refused start, want 1 (never silently changed)", name, got)
		}
	}
}
