// Package natstest runs an embedded nats-server with JetStream for one test: a real server
// on a loopback port, storing in the test's temporary folder, shut down when the test ends.
package natstest

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream starts a server for t and returns a JetStream handle on a connection to it
// (js.Conn() is the connection).
func JetStream(t testing.TB) jetstream.JetStream {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatalf("creating nats-server: %v", err)
	}
	s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	return connect(t, s.ClientURL())
}

// connect returns a JetStream handle on a connection to addr (a comma-separated list for a
// cluster), closed when t ends.
func connect(t testing.TB, addr string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(addr)
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

// Cluster starts three servers clustered on loopback for t and returns them with a
// JetStream handle on a connection to any of them, once the cluster has a JetStream meta
// leader.
func Cluster(t testing.TB) ([]*server.Server, jetstream.JetStream) {
	t.Helper()
	// A route port is chosen free and closed before its server binds it; another process
	// may take it meanwhile, and that server then never starts. Such a start is tried again
	// on new ports.
	var srvs []*server.Server
	var err error
	for try := 1; try <= 3; try++ {
		if srvs, err = startCluster(filepath.Join(t.TempDir(), fmt.Sprintf("try%d", try))); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range srvs {
		t.Cleanup(s.Shutdown)
	}
	var urls []string
	for _, s := range srvs {
		urls = append(urls, s.ClientURL())
	}
	// The election has no event to wait on from outside the servers: poll, with a deadline.
	for deadline := time.Now().Add(30 * time.Second); !metaLed(srvs); {
		if time.Now().After(deadline) {
			t.Fatal("the cluster elected no JetStream meta leader within 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return srvs, connect(t, strings.Join(urls, ","))
}

// startCluster starts three servers clustered on loopback route ports chosen free, under
// dir, and waits until each takes connections; on a failure it stops those it started.
func startCluster(dir string) ([]*server.Server, error) {
	var routes []*url.URL
	var ports []int
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("a route port: %w", err)
		}
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
		routes = append(routes, &url.URL{Scheme: "nats", Host: l.Addr().String()})
		l.Close()
	}
	var srvs []*server.Server
	stop := func() {
		for _, s := range srvs {
			s.Shutdown()
		}
	}
	for i, p := range ports {
		s, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: -1, JetStream: true,
			StoreDir: filepath.Join(dir, fmt.Sprintf("n%d", i+1)), NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "natstest", Host: "127.0.0.1", Port: p}, Routes: routes,
		})
		if err != nil {
			stop()
			return nil, fmt.Errorf("creating nats-server n%d: %w", i+1, err)
		}
		go s.Start()
		srvs = append(srvs, s)
	}
	for _, s := range srvs {
		if !s.ReadyForConnections(30 * time.Second) {
			stop()
			return nil, fmt.Errorf("nats-server %s not ready within 30 s", s.Name())
		}
	}
	return srvs, nil
}

func metaLed(srvs []*server.Server) bool {
	for _, s := range srvs {
		if s.JetStreamIsLeader() {
			return true
		}
	}
	return false
}
