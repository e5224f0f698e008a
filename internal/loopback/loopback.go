// Package loopback starts nats-servers clustered with JetStream on loopback, in this
// process: for the tests and the benchmarks.
package loopback

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/cairnhq/cairn/internal/eventually"
)

// Cluster starts n servers named name-n1… with JetStream, file storage under dir and base's
// other options (SyncAlways, say), clustered on loopback route ports and taking clients on
// ports of their own. It returns them once each takes clients and the cluster has a
// JetStream meta leader.
//
// A route port is chosen free and closed before its server binds it; another process may
// take it meanwhile, and that server then never starts. Such a start is tried again on new
// ports and storage, up to 3 times.
func Cluster(dir, name string, n int, base server.Options) ([]*server.Server, error) {
	var srvs []*server.Server
	var err error
	for try := 1; try <= 3; try++ {
		if srvs, err = start(filepath.Join(dir, fmt.Sprintf("try%d", try)), name, n, base); err == nil {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	// The election has no event to wait on from outside the servers: poll, with a deadline.
	if err := eventually.Within(30*time.Second, eventually.True(func() bool { return metaLed(srvs) })); err != nil {
		Shutdown(srvs)
		return nil, fmt.Errorf("the cluster elected no JetStream meta leader: %w", err)
	}
	return srvs, nil
}

// Shutdown stops every server.
func Shutdown(srvs []*server.Server) {
	for _, s := range srvs {
		s.Shutdown()
	}
}

// start starts the n servers once, on route ports chosen now, and waits until each takes
// clients; on a failure it stops those it started.
func start(dir, name string, n int, base server.Options) ([]*server.Server, error) {
	var routes []*url.URL
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("a route port: %w", err)
		}
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
		routes = append(routes, &url.URL{Scheme: "nats", Host: l.Addr().String()})
		l.Close()
	}
	var srvs []*server.Server
	for i, p := range ports {
		o := base
		o.ServerName, o.Host, o.Port, o.JetStream = fmt.Sprintf("%s-n%d", name, i+1), "127.0.0.1", -1, true
		o.StoreDir, o.NoLog, o.NoSigs = filepath.Join(dir, fmt.Sprintf("n%d", i+1)), true, true
		o.Cluster, o.Routes = server.ClusterOpts{Name: name, Host: "127.0.0.1", Port: p}, routes
		s, err := server.NewServer(&o)
		if err != nil {
			Shutdown(srvs)
			return nil, fmt.Errorf("nats-server %s: %w", o.ServerName, err)
		}
		go s.Start()
		srvs = append(srvs, s)
	}
	for _, s := range srvs {
		if !s.ReadyForConnections(30 * time.Second) {
			Shutdown(srvs)
			return nil, fmt.Errorf("nats-server %s in %s not ready within 30 s", s.Name(), dir)
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
