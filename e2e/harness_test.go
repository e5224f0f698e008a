// Package e2e runs the reference night end to end: `cairn dev` as a real child process
// (so a fault's exit is a real process exit), real SQLite files and the mail folder, and
// compares the outcome with the generator's ground truth.
package e2e

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"flag"
	"fmt"
	"net"
	"net/mail"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/devproc"
	"github.com/cairnhq/cairn/internal/recon"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/faults"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"

	_ "modernc.org/sqlite"
)

// cairnBin is the cairn binary the tests run, built without the race detector; cairnRaceBin
// is the same binary built with it, which the nights of raceChild run. The test process
// itself is always under -race, and every package's own tests run under it too: the
// detector in the child processes is what costs (a race-built child spends several times
// the CPU of a plain one, and the e2e starts hundreds), so most nights run the plain child
// and a few (raceChild) keep races across the multi-process paths caught: one cairn dev
// night, a crash and its resume, and two instances of every service as their own processes.
var cairnBin, cairnRaceBin string

// codeVersion is the code version the test binaries are built with: every step records it.
const codeVersion = "e2e-build"

func TestMain(m *testing.M) {
	// A race-built child process sleeps a second at exit unless told not to; the tests start
	// and stop hundreds of them.
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	dir, err := os.MkdirTemp("", "cairn-e2e-bin")
	if err != nil {
		panic(err)
	}
	code := run(m, dir)
	os.RemoveAll(dir)
	os.Exit(code)
}

// run builds the binary into dir, moves to a working folder under dir and runs the tests.
func run(m *testing.M, dir string) int {
	// Two builds of the cairn binary, which runs every service too (`cairn service NAME`,
	// procs_test.go): linking one binary instead of thirteen, once per test binary. The
	// plain one serves most nights, the race one those of raceChild (see cairnBin). Both
	// name their code version as the Makefile's build does (-ldflags -X).
	cairnBin = filepath.Join(dir, "cairn")
	cairnRaceBin = filepath.Join(dir, "cairn-race")
	errs := make(chan error, 2)
	build := func(out string, flags ...string) {
		args := append(append([]string{"build"}, flags...), "-ldflags", "-X github.com/cairnhq/cairn/internal/service.version="+codeVersion,
			"-o", out, absPath("..", "cmd", "cairn"))
		if b, err := exec.Command("go", args...).CombinedOutput(); err != nil {
			errs <- fmt.Errorf("building %s: %v\n%s", filepath.Base(out), err, b)
			return
		}
		errs <- nil
	}
	go build(cairnBin)
	go build(cairnRaceBin, "-race")
	for range 2 {
		if err := <-errs; err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	// The deploy configuration's certificate paths are relative to the working directory
	// (deploy/nats/single.conf: run it from that folder). The tests work from a folder whose
	// tls/ is deploy/nats/tls, set here once, so that no test changes the working directory
	// (t.Chdir, which a parallel test may not) and every path the tests name is absolute
	// (absPath); a child process that would write under its working directory writes here.
	wd := filepath.Join(dir, "wd")
	if err := os.Mkdir(wd, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := os.Symlink(filepath.Join(deployDir, "nats", "tls"), filepath.Join(wd, "tls")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := os.Chdir(wd); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Every test but TestUpgradeCapture runs in parallel. The ones that keep the machine
	// busy (a night, a crash, a restart) take a night slot (takeNightSlot, nightSlots at
	// once); the ones that spend most of their time waiting (a step stalled for a minute, a
	// relay down, a stop's grace, an election) take none and run beside them. A test
	// waiting for a slot holds a parallel one, so every test may run at once unless
	// -test.parallel says otherwise: the waiting tests start at once instead of behind the
	// nights.
	flag.Parse()
	if !flagSet("test.parallel") {
		_ = flag.Set("test.parallel", "128")
	}
	return m.Run()
}

// absPath is the path made of elem, relative to the package's folder (where go test starts
// the test binary), made absolute: TestMain leaves that folder.
func absPath(elem ...string) string {
	p, err := filepath.Abs(filepath.Join(elem...))
	if err != nil {
		panic(err)
	}
	return p
}

// flagSet reports whether the command line set the flag name.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

const (
	warehouse = "ldh"
	date      = "2026-10-13"
	runID     = "run-2026-10-13-ldh"
)

// night is one generated night with its own data folder and NATS port.
type night struct {
	t     *testing.T
	dir   string
	url   string
	truth recon.Truth
	dev   *devproc.Proc
	bin   string // the cairn binary its processes run: cairnBin, or cairnRaceBin (raceChild)
	logs  int
	js    jetstream.JetStream
	env   []string // every process of the night gets it (overHTTP: CAIRN_LEDGER_URL)
	// cliEnv is what the night's commands (cairn's: cli, cliCombined; the NATS CLI's:
	// natsRun, natsInTerminal) get besides: what a test would otherwise set for the whole
	// test binary (t.Setenv), which a parallel test may not.
	cliEnv []string
}

func newNight(t *testing.T, unreadable int) *night {
	t.Helper()
	return newNightOf(t, 312, 40, unreadable)
}

// newNightOf is newNight with invoices and mismatches of its own.
func newNightOf(t *testing.T, invoices, mismatches, unreadable int) *night {
	t.Helper()
	dir := t.TempDir()
	truth, err := recon.Generate(context.Background(), recon.GenConfig{Warehouse: warehouse, Date: date, Invoices: invoices,
		Mismatches: mismatches, Unreadable: unreadable, Seed: 1, InboxDir: filepath.Join(dir, "inbox"),
		ERPPath: filepath.Join(dir, "erp.db"), TruthDir: filepath.Join(dir, "truth")})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	n := &night{t: t, dir: dir, url: fmt.Sprintf("nats://127.0.0.1:%d", port), truth: truth, bin: cairnBin}
	t.Cleanup(n.stop)
	return n
}

// raceChild makes the night's cairn dev and services run the race-built binary (see
// cairnBin), so that a data race in them is detected as in every night before: its report
// goes to the process's log, and the process exits 66 where it would have exited 0.
func (n *night) raceChild() { n.bin = cairnRaceBin }

// start runs `cairn dev` with extra environment and waits for its "ready".
func (n *night) start(env ...string) {
	n.t.Helper()
	n.logs++
	p, err := devproc.Start(n.bin, append(os.Environ(), append([]string{"CAIRN_DATA_DIR=" + n.dir, "CAIRN_NATS_URL=" + n.url,
		"CAIRN_HEARTBEAT=1s", "CAIRN_LEASE=5s", "CAIRN_ACK_WAIT=10s"}, append(slices.Clone(n.env), env...)...)...),
		filepath.Join(n.dir, fmt.Sprintf("dev-%d.log", n.logs)), time.Minute)
	if err != nil {
		n.t.Fatal(err)
	}
	n.dev = p
	nc, err := nats.Connect(n.url)
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(nc.Close)
	n.js, _ = jetstream.New(nc)
}

// metricsAddr is where the running `cairn dev` serves /metrics (started with anyPort).
func (n *night) metricsAddr() string {
	n.t.Helper()
	addr, err := metricsOf(n.dev)
	if err != nil {
		n.t.Fatal(err)
	}
	return addr
}

// crash runs `cairn dev` with an @once fault that exits the process, starts the run, and
// checks that the process died of it.
func (n *night) crash(fault string) {
	n.t.Helper()
	n.start("CAIRN_FAULTS=" + fault)
	n.startRun()
	code, err := n.dev.Wait(runLimit)
	if err != nil {
		n.t.Fatal(err)
	}
	if code != faults.ExitCode {
		n.t.Fatalf("cairn dev exited %d, want %d from the injected fault (log %s)", code, faults.ExitCode, n.dev.Log)
	}
	if !faults.Fired(filepath.Join(n.dir, "faults"), fault) {
		n.t.Fatalf("the @once marker of %s is missing: the fault never fired", fault)
	}
}

func (n *night) stop() {
	if n.dev != nil {
		n.dev.Stop(20 * time.Second)
	}
}

func (n *night) publish(subject, body string) {
	n.t.Helper()
	if _, err := n.js.Publish(context.Background(), subject, []byte(body)); err != nil {
		n.t.Fatal(err)
	}
}

func (n *night) startRun() {
	n.publish(events.RunStartSubject, fmt.Sprintf(`{"run_id":%q,"warehouse":%q,"date":%q}`, runID, warehouse, date))
}

// waitStatus watches the run's checkpoint until its status is one of want.
func (n *night) waitStatus(limit time.Duration, want ...kc.Status) *kc.Record {
	n.t.Helper()
	return n.waitRecord(limit, fmt.Sprint(want), func(r *kc.Record) bool { return slices.Contains(want, r.Status) })
}

// audit counts the run's audit events by kind.
func (n *night) audit() map[string]int {
	n.t.Helper()
	evs, err := events.ReadSubject(context.Background(), n.js, assets.StreamAudit, events.AuditSubject(runID))
	if err != nil {
		n.t.Fatal(err)
	}
	counts := map[string]int{}
	for _, e := range evs {
		var a events.Audit
		if err := e.Unmarshal(&a); err != nil {
			n.t.Fatal(err)
		}
		counts[a.Event]++
	}
	return counts
}

func (n *night) db(name string) *sql.DB {
	n.t.Helper()
	// cairn dev may hold a write lock (creating its tables) while a test reads or writes:
	// wait for it rather than fail with SQLITE_BUSY.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(n.dir, name)+"?_pragma=busy_timeout(10000)")
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { db.Close() })
	return db
}

// assertTruth compares the ledger, the stock store and the mail with the ground truth.
func (n *night) assertTruth() {
	n.t.Helper()
	n.assertTruthExtra(0)
}

// assertTruthExtra is assertTruth for a night that sent extra messages besides its debit
// notes and report (a rerun's own report).
func (n *night) assertTruthExtra(extra int) {
	t := n.t
	t.Helper()
	want := map[string]int64{}
	for _, a := range n.truth.Adjustments {
		want[runID+":"+a.KeySuffix] = a.AmountPaise
	}
	rows, err := n.db("ledger.db").Query(`SELECT key, amount_paise FROM ledger_entries WHERE reverses IS NULL`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	count := 0
	for rows.Next() {
		var k string
		var v int64
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		got[k] = v
		count++
	}
	rows.Close()
	if count != len(want) || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ledger: %d rows %v, want %d rows %v", count, got, len(want), want)
	}
	erp := n.db("erp.db")
	stock := map[string][2]int64{}
	rows, err = erp.Query(`SELECT key, qty_delta, value_delta_paise FROM stock_adjustments WHERE reverses IS NULL`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		var q, v int64
		if err := rows.Scan(&k, &q, &v); err != nil {
			t.Fatal(err)
		}
		stock[k] = [2]int64{q, v}
	}
	rows.Close()
	if len(stock) != len(n.truth.Adjustments) {
		t.Errorf("stock adjustments: %d, want %d", len(stock), len(n.truth.Adjustments))
	}
	for _, a := range n.truth.Adjustments {
		if g := stock[runID+":stock:"+a.KeySuffix]; g != [2]int64{a.QtyDelta, a.ValueDeltaPaise} {
			t.Errorf("stock adjustment %s: %v, want %d/%d", a.KeySuffix, g, a.QtyDelta, a.ValueDeltaPaise)
		}
	}
	for _, l := range n.truth.StockLevelsAfter {
		var q, v int64
		if err := erp.QueryRow(`SELECT qty, value_paise FROM stock_levels WHERE warehouse = ? AND sku = ?`, warehouse, l.SKU).Scan(&q, &v); err != nil {
			t.Fatalf("stock level %s: %v", l.SKU, err)
		}
		if q != l.Qty || v != l.ValuePaise {
			t.Errorf("stock level %s: %d/%d, want %d/%d", l.SKU, q, v, l.Qty, l.ValuePaise)
		}
	}
	files, _ := filepath.Glob(filepath.Join(n.dir, "mail", "*.eml"))
	if len(files) != len(n.truth.DebitNotes)+1+extra {
		t.Errorf("mail: %d messages, want %d debit notes + 1 report", len(files), len(n.truth.DebitNotes))
	}
	keys := []string{runID + ":report"}
	for _, d := range n.truth.DebitNotes {
		keys = append(keys, runID+":debit:"+d.SupplierID)
	}
	for _, k := range keys {
		h := sha256.Sum256([]byte(k))
		f, err := os.Open(filepath.Join(n.dir, "mail", hex.EncodeToString(h[:])+".eml"))
		if err != nil {
			t.Errorf("no mail for %s: %v", k, err)
			continue
		}
		m, err := mail.ReadMessage(f)
		f.Close()
		if err != nil {
			t.Errorf("mail for %s: %v", k, err)
			continue
		}
		if m.Header.Get("X-Cairn-Key") != k || m.Header.Get("Message-ID") != "<"+strings.ReplaceAll(k, ":", ".")+"@cairn.local>" {
			t.Errorf("mail for %s: X-Cairn-Key %q, Message-ID %q", k, m.Header.Get("X-Cairn-Key"), m.Header.Get("Message-ID"))
		}
	}
}
