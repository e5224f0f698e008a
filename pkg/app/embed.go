package app

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
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
