package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/loopback"
)

// embedded starts a nats-server with JetStream and file storage in dir; syncAlways sets
// sync_interval: always (every write fsynced before it is acknowledged).
func embedded(dir string, syncAlways bool) (*server.Server, error) {
	s, err := server.NewServer(&server.Options{
		ServerName: "cairn-bench", Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir,
		SyncAlways: syncAlways, NoLog: true, NoSigs: true,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(15 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats-server in %s did not start", dir)
	}
	return s, nil
}

// connect opens a client connection to s over loopback TCP, as a service would.
func connect(s *server.Server, name string) (*nats.Conn, jetstream.JetStream, error) {
	return connectURL(s.ClientURL(), name)
}

// connectURL opens a client connection to the servers of url (comma-separated).
func connectURL(url, name string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, nats.Name(name))
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("JetStream on %s: %w", url, err)
	}
	return nc, js, nil
}

// nodes are the servers a measurement runs on: one, or three clustered on loopback.
type nodes struct {
	srvs []*server.Server
}

// startNodes starts n servers (1, or 3 in a cluster, which then has a JetStream meta
// leader) with JetStream and file storage under dir; syncAlways as embedded's.
func startNodes(dir string, syncAlways bool, n int) (*nodes, error) {
	if n <= 1 {
		s, err := embedded(dir, syncAlways)
		if err != nil {
			return nil, err
		}
		return &nodes{srvs: []*server.Server{s}}, nil
	}
	srvs, err := loopback.Cluster(dir, "cairn-bench", n, server.Options{SyncAlways: syncAlways})
	if err != nil {
		return nil, err
	}
	return &nodes{srvs: srvs}, nil
}

// url is the servers' client URLs, comma-separated.
func (ns *nodes) url() string {
	var urls []string
	for _, s := range ns.srvs {
		urls = append(urls, s.ClientURL())
	}
	return strings.Join(urls, ",")
}

func (ns *nodes) shutdown() {
	for _, s := range ns.srvs {
		s.Shutdown()
	}
	for _, s := range ns.srvs {
		s.WaitForShutdown()
	}
}

// selfPeakRSS is this process's peak resident set size in bytes (0 where unknown).
func selfPeakRSS() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Maxrss * 1024 // KiB on Linux
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peakRSS reads a live process's peak resident set size (VmHWM) in bytes; 0 where unknown.
func peakRSS(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb * 1024
		}
	}
	return 0
}

// Machine names the machine the figures come from.
type Machine struct {
	CPU    string `json:"cpu"`
	Cores  int    `json:"cores"`
	Memory string `json:"memory"`
	OS     string `json:"os"`
	Go     string `json:"go"`
}

// ThisMachine describes the machine it runs on, from /proc where it can.
func ThisMachine() Machine {
	m := Machine{Cores: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH, Go: runtime.Version()}
	m.CPU = procField("/proc/cpuinfo", "model name", ":")
	if kb := procField("/proc/meminfo", "MemTotal", ":"); kb != "" {
		if n, err := strconv.ParseInt(strings.Fields(kb)[0], 10, 64); err == nil {
			m.Memory = fmt.Sprintf("%.1f GiB", float64(n)/(1<<20))
		}
	}
	return m
}

func procField(path, key, sep string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), sep)
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// MiB formats bytes as mebibytes.
func MiB(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// streamsLed reports whether every stream has a leader: a stream created a moment ago on a
// cluster answers "no response from stream" until its replicas elect one.
func streamsLed(ctx context.Context, js jetstream.JetStream) error {
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return err
		}
		if info.Cluster != nil && info.Cluster.Leader == "" {
			return fmt.Errorf("stream %s has no leader yet", name)
		}
	}
	return names.Err()
}
