// Package natstest runs an embedded nats-server with JetStream for one test: a real server
// on a loopback port, storing in the test's temporary folder, shut down when the test ends.
package natstest

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/loopback"
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
	srvs, err := loopback.Cluster(t.TempDir(), "natstest", 3, server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { loopback.Shutdown(srvs) })
	var urls []string
	for _, s := range srvs {
		urls = append(urls, s.ClientURL())
	}
	return srvs, connect(t, strings.Join(urls, ","))
}
