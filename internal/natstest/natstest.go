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
	var routes []*url.URL
	var ports []int
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("a route port: %v", err)
		}
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
		routes = append(routes, &url.URL{Scheme: "nats", Host: l.Addr().String()})
		l.Close()
	}
	dir := t.TempDir()
	var srvs []*server.Server
	var urls []string
	for i, p := range ports {
		s, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: -1, JetStream: true,
			StoreDir: filepath.Join(dir, fmt.Sprintf("n%d", i+1)), NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "natstest", Host: "127.0.0.1", Port: p}, Routes: routes,
		})
		if err != nil {
			t.Fatalf("creating nats-server n%d: %v", i+1, err)
		}
		go s.Start()
		t.Cleanup(s.Shutdown)
		srvs = append(srvs, s)
	}
	for _, s := range srvs {
		if !s.ReadyForConnections(30 * time.Second) {
			t.Fatalf("nats-server %s not ready", s.Name())
		}
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

func metaLed(srvs []*server.Server) bool {
	for _, s := range srvs {
		if s.JetStreamIsLeader() {
			return true
		}
	}
	return false
}
