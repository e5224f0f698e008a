package runner

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// Real network failures, from real sockets, are temporary: the runner retries them.
func TestClassifyNetworkFailuresTemporary(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		_, err = net.DialTimeout("tcp", addr, 10*time.Second)
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dialing a closed port: %v, want ECONNREFUSED", err)
		}
		assertTemporary(t, err)
	})
	t.Run("reset", func(t *testing.T) {
		client := resetConn(t)
		_, err := client.Read(make([]byte, 1))
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("reading a reset connection: %v, want ECONNRESET", err)
		}
		assertTemporary(t, err)
	})
	t.Run("broken pipe", func(t *testing.T) {
		client := resetConn(t)
		var err error
		deadline := time.Now().Add(30 * time.Second)
		for err == nil && time.Now().Before(deadline) {
			_, err = client.Write(make([]byte, 64<<10))
		}
		if !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("writing to a reset connection: %v, want EPIPE or ECONNRESET", err)
		}
		assertTemporary(t, err)
	})
	t.Run("timeout", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(-time.Second))
		_, err = c.Read(make([]byte, 1))
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("reading past the deadline: %v, want a net.Error timeout", err)
		}
		assertTemporary(t, err)
	})
	t.Run("not the network", func(t *testing.T) {
		for _, err := range []error{io.ErrUnexpectedEOF, errors.New("connection reset by peer"), syscall.ENOENT} {
			if IsTemporary(fmt.Errorf("posting: %w", err)) {
				t.Errorf("%v is temporary: only marked errors and real network failures are", err)
			}
		}
	})
}

func assertTemporary(t *testing.T, err error) {
	t.Helper()
	wrapped := fmt.Errorf("posting ledger entry %q: %w", "k", err)
	if got := classify(wrapped); got != classTemporary {
		t.Errorf("classify(%v) = %s, want temporary", wrapped, got)
	}
	if !IsTemporary(wrapped) {
		t.Errorf("IsTemporary(%v) = false", wrapped)
	}
}

// resetConn returns a client connection whose server side closed with SO_LINGER 0: the
// kernel answers the client with a RST.
func resetConn(t *testing.T) net.Conn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if err := server.(*net.TCPConn).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	server.Close()
	return client
}
