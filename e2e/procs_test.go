package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cairnhq/cairn/internal/devproc"
	"github.com/cairnhq/cairn/internal/eventually"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/faults"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// serviceCmd is the command line of one service: the cairn binary TestMain built runs every
// service as its own binary under services/ does (`cairn service NAME`), so the tests link
// one race binary, not one per service.
func serviceCmd(name string) (string, []string) { return cairnBin, []string{"service", name} }

// procsNight is a night whose services each run as their own OS process, against a
// nats-server embedded in the test process that the test can stop and start again on the
// same port and storage. The embedded night gives it the night's helpers (startRun,
// waitStatus, audit, assertTruth).
type procsNight struct {
	*night
	port  int
	store string // the nats-server's storage
	srv   *server.Server
	nc    *nats.Conn

	mu      sync.Mutex // guards what follows: svc may start processes from several goroutines
	procs   []*devproc.Proc
	metrics map[*devproc.Proc]string // where each process serves /metrics
	count   map[string]int           // processes started per service, for the log names
	ports   map[string]bool          // the servers' addresses, which no process may keep for its metrics
}

// newProcsNight generates the night, starts the nats-server and runs `cairn init`. It
// starts no service.
func newProcsNight(t *testing.T) *procsNight {
	t.Helper()
	n := newNight(t, 0)
	u, err := url.Parse(n.url)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	h := &procsNight{night: n, port: port, store: t.TempDir(), metrics: map[*devproc.Proc]string{},
		count: map[string]int{}, ports: map[string]bool{u.Host: true}}
	h.startServer()
	t.Cleanup(h.cleanup)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cairnBin, "init")
	cmd.Env = h.env()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cairn init: %v\n%s", err, out)
	}
	h.nc, err = nats.Connect(h.url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if h.js, err = jetstream.New(h.nc); err != nil {
		t.Fatal(err)
	}
	return h
}

// env is the environment every process gets, then extra (a later setting wins).
func (h *procsNight) env(extra ...string) []string {
	return append(append(os.Environ(), "CAIRN_NATS_URL="+h.url, "CAIRN_DATA_DIR="+h.dir, "CAIRN_HEARTBEAT=1s",
		"CAIRN_LEASE=5s", "CAIRN_ACK_WAIT=10s", "CAIRN_TAKEOVER_GAP=300ms"), append(slices.Clone(h.night.env), extra...)...)
}

// startServer starts the embedded nats-server on the night's port and storage.
func (h *procsNight) startServer() {
	h.t.Helper()
	s, err := server.NewServer(&server.Options{ServerName: "cairn-e2e", Host: "127.0.0.1", Port: h.port,
		JetStream: true, StoreDir: h.store, NoSigs: true, NoLog: true})
	if err != nil {
		h.t.Fatalf("nats-server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		h.t.Fatalf("nats-server on port %d not ready within 30s", h.port)
	}
	h.srv = s
}

// stopServer shuts the nats-server down and waits until it has.
func (h *procsNight) stopServer() {
	if h.srv == nil {
		return
	}
	h.srv.Shutdown()
	h.srv.WaitForShutdown()
	h.srv = nil
}

// svc starts one process of the named service, with the common environment and then env,
// and waits for its "ready".
func (h *procsNight) svc(name string, env ...string) *devproc.Proc {
	h.t.Helper()
	p, err := h.start(name, env)
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

// svcs starts one process of each named service at once, with the same extra env, and
// returns them in the order of names.
func (h *procsNight) svcs(names []string, env ...string) []*devproc.Proc {
	h.t.Helper()
	ps := make([]*devproc.Proc, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() { ps[i], errs[i] = h.start(name, env) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			h.t.Fatal(err)
		}
	}
	return ps
}

// start starts one process of the named service with env and waits for its "ready".
// Its metrics go on a port the kernel chooses (anyPort). A server's port is free while
// that server is stopped; a process given one is stopped and started again, so the server
// can come back on it.
func (h *procsNight) start(name string, env []string) (*devproc.Proc, error) {
	for {
		h.mu.Lock()
		h.count[name]++
		log := filepath.Join(h.dir, fmt.Sprintf("%s-%d.log", name, h.count[name]))
		h.mu.Unlock()
		_, args := serviceCmd(name)
		p, err := devproc.StartArgs(h.night.bin, args, h.env(append([]string{anyPort}, env...)...), log, time.Minute)
		if err != nil {
			return nil, err
		}
		addr, err := metricsOf(p)
		if err != nil {
			p.Stop(20 * time.Second)
			return nil, err
		}
		h.mu.Lock()
		taken := h.ports[addr]
		if !taken {
			h.procs = append(h.procs, p)
			h.metrics[p] = addr
		}
		h.mu.Unlock()
		if !taken {
			return p, nil
		}
		p.Stop(20 * time.Second)
	}
}

// metricsAddr is where p serves /metrics.
func (h *procsNight) metricsAddr(p *devproc.Proc) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.metrics[p]
}

// cleanup stops every process (continuing a stopped one first: SIGINT, then SIGKILL after a
// bound), shows the end of each log if the test failed, and stops the server.
func (h *procsNight) cleanup() {
	h.mu.Lock()
	procs := h.procs
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(func() {
			_ = p.Signal(syscall.SIGCONT)
			p.Stop(20 * time.Second)
		})
	}
	wg.Wait()
	if h.t.Failed() {
		for _, p := range procs {
			h.t.Logf("end of %s:\n%s", filepath.Base(p.Log), tail(p.Log, 10))
		}
	}
	if h.nc != nil {
		h.nc.Close()
	}
	h.stopServer()
}

// waitRecord watches the run's checkpoint until ok holds for it.
func (h *night) waitRecord(limit time.Duration, what string, ok func(*kc.Record) bool) *kc.Record {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	kv, err := h.js.KeyValue(ctx, assets.BucketRuns)
	if err != nil {
		h.t.Fatal(err)
	}
	w, err := kv.Watch(ctx, runID)
	if err != nil {
		h.t.Fatal(err)
	}
	defer w.Stop()
	var last *kc.Record
	for e := range w.Updates() {
		if e == nil || e.Operation() != jetstream.KeyValuePut {
			continue
		}
		r, err := kc.Decode(e.Value())
		if err != nil {
			h.t.Fatal(err)
		}
		last = r
		if ok(r) {
			return r
		}
	}
	h.t.Fatalf("the run's record did not show %s within %s; last record: %+v", what, limit, last)
	return nil
}

// waitFired waits until the @once fault spec has left its marker.
func (h *procsNight) waitFired(spec string, limit time.Duration) {
	h.t.Helper()
	dir := filepath.Join(h.dir, "faults")
	if !poll(limit, func() bool { return faults.Fired(dir, spec) }) {
		h.t.Fatalf("fault %s did not fire within %s (no marker)", spec, limit)
	}
}

// scrape reads the metrics p serves; see scrape.
func (h *procsNight) scrape(p *devproc.Proc) map[string]float64 {
	h.t.Helper()
	m, err := scrape(h.metricsAddr(p))
	if err != nil {
		h.t.Fatalf("metrics of %s: %v", filepath.Base(p.Log), err)
	}
	return m
}

// waitMetric polls p's /metrics until pred holds for the value of key (see metricValue)
// and returns that value.
func (h *procsNight) waitMetric(p *devproc.Proc, key string, pred func(float64) bool, limit time.Duration) float64 {
	h.t.Helper()
	addr := h.metricsAddr(p)
	var v float64
	var last error
	ok := poll(limit, func() bool {
		m, err := scrape(addr)
		if last = err; err != nil {
			return false
		}
		v = metricValue(m, key)
		return pred(v)
	})
	if !ok {
		h.t.Fatalf("%s of %s: last value %v (last error %v) after %s", key, filepath.Base(p.Log), v, last, limit)
	}
	return v
}

// scrape reads http://addr/metrics. The keys are a metric's name and its labels sorted by
// name, as in cairn_fenced_total{step="post-ledger"}; a histogram or summary gives
// name_count and name_sum.
func scrape(addr string) (map[string]float64, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET http://%s/metrics: %s", addr, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing http://%s/metrics: %w", addr, err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(labels)
			ls := ""
			if len(labels) > 0 {
				ls = "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.Counter != nil:
				out[name+ls] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[name+ls] = m.GetGauge().GetValue()
			case m.Untyped != nil:
				out[name+ls] = m.GetUntyped().GetValue()
			case m.Histogram != nil:
				out[name+"_count"+ls] = float64(m.GetHistogram().GetSampleCount())
				out[name+"_sum"+ls] = m.GetHistogram().GetSampleSum()
			case m.Summary != nil:
				out[name+"_count"+ls] = float64(m.GetSummary().GetSampleCount())
				out[name+"_sum"+ls] = m.GetSummary().GetSampleSum()
			}
		}
	}
	return out, nil
}

// sumByName adds up every series of the metric name, whatever its labels.
func sumByName(m map[string]float64, name string) float64 {
	var sum float64
	for k, v := range m {
		if n, _, _ := strings.Cut(k, "{"); n == name {
			sum += v
		}
	}
	return sum
}

// metricValue is m[key] for a key with labels, and the sum over every series for a bare
// metric name.
func metricValue(m map[string]float64, key string) float64 {
	if strings.Contains(key, "{") {
		return m[key]
	}
	return sumByName(m, key)
}

// poll checks ok until it holds (true) or limit has passed (false): eventually.Within for
// the many waits here whose callers decide what a miss means (fail, report, or read on).
func poll(limit time.Duration, ok func() bool) bool {
	return eventually.Within(limit, eventually.True(ok)) == nil
}

// dumpStuck ends each process of a step that r shows in progress with SIGQUIT and logs
// the goroutines of its dump that run Cairn's code: where a step that neither finishes nor
// fails waits. The log files are gone with the CI machine; the test's output is not.
func (h *procsNight) dumpStuck(r *kc.Record) {
	h.mu.Lock()
	procs := slices.Clone(h.procs)
	h.mu.Unlock()
	for _, step := range r.Pipeline {
		if r.Step(step).Status != kc.InProgress {
			continue
		}
		for _, p := range procs {
			if !strings.HasPrefix(filepath.Base(p.Log), step+"-") || p.Signal(syscall.SIGQUIT) != nil {
				continue
			}
			if _, err := p.Wait(20 * time.Second); err != nil {
				h.t.Logf("%s: no goroutine dump: %v", filepath.Base(p.Log), err)
				continue
			}
			h.t.Logf("%s, in progress: its goroutines in Cairn's code at SIGQUIT:\n%s", filepath.Base(p.Log), cairnGoroutines(p.Log))
		}
	}
}

// cairnGoroutines is the goroutines of the dump at the end of the log at path whose stacks
// hold a frame of Cairn's own packages.
func cairnGoroutines(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	dump := string(b)
	if i := strings.LastIndex(dump, "SIGQUIT: quit"); i >= 0 {
		dump = dump[i:]
	}
	var keep []string
	for g := range strings.SplitSeq(dump, "\n\n") {
		if strings.HasPrefix(g, "goroutine ") && strings.Contains(g, "github.com/cairnhq/cairn/") {
			keep = append(keep, g)
		}
	}
	return strings.Join(keep, "\n\n")
}

// freeAddr is a loopback address with a port free at the moment.
func freeAddr() (string, error) { return freeAddrOn("127.0.0.1") }

// freeAddrOn is an address on host (a loopback address) with a port free at the moment.
func freeAddrOn(host string) (string, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// outageHost is the loopback address an outside system that is down for a while is named
// on: every process of the tests binds 127.0.0.1 (metrics on port 0 among them), so none can
// take the down system's port before it comes back and answer in its place.
const outageHost = "127.0.0.2"

// anyPort has a service bind its metrics on a port the kernel chooses. A port chosen
// beforehand and closed (freeAddr) can be taken by another process before the service binds
// it, and the service then stops: "bind: address already in use".
const anyPort = "CAIRN_METRICS_ADDR=" + anyAddr

// anyAddr is a loopback address on a port the kernel chooses.
const anyAddr = "127.0.0.1:0"

// metricsOf is the address p serves /metrics on: the url of the "serving metrics" line of
// its log, which a service writes before it prints "ready".
func metricsOf(p *devproc.Proc) (string, error) { return servedAt(p, "serving metrics") }

// servedAt is the host:port of the url of p's first log line with the message msg.
func servedAt(p *devproc.Proc, msg string) (string, error) {
	f, err := os.Open(p.Log)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line struct{ Msg, URL string }
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.Msg != msg {
			continue
		}
		u, err := url.Parse(line.URL)
		if err != nil {
			return "", fmt.Errorf("%s: %s at %q: %w", p.Log, msg, line.URL, err)
		}
		return u.Host, nil
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s has no %q line", p.Log, msg)
}

// tail is the last n lines of the file at path.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}
