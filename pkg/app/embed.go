package app

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
)

// Embedded starts a nats-server with JetStream in this process, named name, on host:port
// (port -1: a free one; s.ClientURL() says which), storing under dir: a development
// server for `cairn dev`, demos and tests. Shut it down with s.Shutdown().
func Embedded(name, host string, port int, dir string) (*server.Server, error) {
	s, err := server.NewServer(&server.Options{
		ServerName: name, Host: host, Port: port, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(15 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats-server on %s did not start", net.JoinHostPort(host, strconv.Itoa(port)))
	}
	return s, nil
}

// served is a pipeline's own embedded server and a connection to it that takes its replies
// in the pipeline's inbox, as a hosted service does: what Dev and RunLocal host a pipeline
// on, storing under dir/nats.
type served struct {
	srv *server.Server
	nc  *nats.Conn
	js  jetstream.JetStream
}

// serve starts the server named name on host:port (-1: a free one) and connects to it as
// client.
func serve(name, client, host string, port int, dir string, sp assets.Space) (*served, error) {
	srv, err := Embedded(name, host, port, filepath.Join(dir, "nats"))
	if err != nil {
		return nil, err
	}
	s := &served{srv: srv}
	url := srv.ClientURL()
	if s.nc, err = nats.Connect(url, nats.Name(client), nats.CustomInboxPrefix(sp.Inbox())); err != nil {
		s.close()
		return nil, fmt.Errorf("connecting to %s: %w", url, err)
	}
	if s.js, err = jetstream.New(s.nc); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// close closes the connection and shuts the server down, waiting for it.
func (s *served) close() {
	if s.nc != nil {
		s.nc.Close()
	}
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
}
