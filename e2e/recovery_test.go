package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/chaos"
	job "github.com/cairnhq/cairn/internal/night"
	"github.com/cairnhq/cairn/internal/recon"
	"github.com/cairnhq/cairn/pkg/artifacts"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/faults"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/outbox"
	"github.com/cairnhq/cairn/pkg/runner"
	"github.com/cairnhq/cairn/pkg/supervisor"
)

// nightSlots bounds the busy tests that run at once (see TestMain): each runs race-built
// processes with their own nats-server, which spend part of their time waiting on fsync
// (the servers sync every write) and the clock (heartbeats), so a 2-core machine runs
// three of them well beside the waiting tests. A test that waits for a slot queues: first
// the long ones (takeNightSlotFirst), then the others in turn.
var nightSlots = struct {
	sync.Mutex
	free        int
	first, rest []chan struct{}
}{free: 3}

func takeNightSlot(t *testing.T) {
	t.Helper()
	takeSlot(t, false)
}

// deploySlot lets one deploy night (newDeployNight) run at a time: its nats-server runs in
// the test process, race-built, checking bcrypt passwords over TLS for a dozen services
// starting at once, and two such servers starve each other's clients on two cores.
var deploySlot = make(chan struct{}, 1)

// takeDeployNightSlot takes the deploy slot, then a night slot: a test waiting for the one
// holds no other.
func takeDeployNightSlot(t *testing.T) {
	t.Helper()
	deploySlot <- struct{}{}
	t.Cleanup(func() { <-deploySlot })
	takeSlot(t, false)
}

// takeNightSlotFirst is takeNightSlot for a test far longer than the others: it has the
// next free slot before every test queued by takeNightSlot, so that it does not start
// last and run on alone after the others.
func takeNightSlotFirst(t *testing.T) {
	t.Helper()
	takeSlot(t, true)
}

func takeSlot(t *testing.T, first bool) {
	t.Helper()
	s := &nightSlots
	s.Lock()
	if s.free > 0 {
		s.free--
		s.Unlock()
	} else {
		c := make(chan struct{})
		if first {
			s.first = append(s.first, c)
		} else {
			s.rest = append(s.rest, c)
		}
		s.Unlock()
		<-c
	}
	t.Cleanup(func() {
		s.Lock()
		defer s.Unlock()
		switch {
		case len(s.first) > 0:
			close(s.first[0])
			s.first = s.first[1:]
		case len(s.rest) > 0:
			close(s.rest[0])
			s.rest = s.rest[1:]
		default:
			s.free++
		}
	})
}

// newLoggedNight is newNight whose dev logs are shown when the test fails (the night's
// folder goes with the test).
func newLoggedNight(t *testing.T) *night {
	t.Helper()
	n := newNight(t, 0)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		logs, _ := filepath.Glob(filepath.Join(n.dir, "dev-*.log"))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			t.Logf("%s, last lines:\n%s", filepath.Base(l), strings.Join(lines[max(0, len(lines)-20):], "\n"))
		}
	})
	return n
}

// nightOutcome is everything a finished night left that a crash must not change.
type nightOutcome = chaos.Outcome

// outcome reads what the finished run rec left.
func (n *night) outcome(rec *kc.Record) nightOutcome {
	n.t.Helper()
	ctx := context.Background()
	o := nightOutcome{
		// created_at is the writer's clock: a repeat after a restart keeps the first row's,
		// but two nights are written at different times.
		Ledger: n.column("ledger.db", `SELECT key||' '||run_id||' '||invoice_no||' '||line||' '||kind||' '||supplier_id||' '||
			amount_paise||' '||coalesce(reverses, '-') FROM ledger_entries ORDER BY key`),
		Stock: n.column("erp.db", `SELECT key||' '||run_id||' '||warehouse||' '||sku||' '||supplier_id||' '||qty_delta||' '||
			value_delta_paise||' '||reason||' '||coalesce(reverses, '-') FROM stock_adjustments ORDER BY key`),
		Levels: n.column("erp.db", `SELECT warehouse||' '||sku||' '||qty||' '||value_paise FROM stock_levels ORDER BY warehouse, sku`),
	}
	msgs, err := supervisor.Queued(ctx, n.js, assets.Default, nil, runID)
	if err != nil {
		n.t.Fatal(err)
	}
	// A restart queues again what a dead attempt queued; the stream keeps both copies (their
	// ids carry the attempt's token, outbox.EventID) and the sender sends one, so the outbox
	// is compared by key. The mail folder shows that each key went out once.
	for _, m := range msgs {
		o.Outbox = append(o.Outbox, m.Key)
	}
	slices.Sort(o.Outbox)
	o.Outbox = slices.Compact(o.Outbox)
	o.Mail = n.mailFiles()
	store, err := artifacts.Open(ctx, n.js, assets.ObjectArtifacts)
	if err != nil {
		n.t.Fatal(err)
	}
	b, err := store.Load(ctx, rec.Step(job.Report).Output)
	if err != nil {
		n.t.Fatal(err)
	}
	o.Report = string(b)
	c := n.audit()
	o.ExtractorCalls, o.DocumentReads = c["extractor.called"], c["document.read"]
	return o
}

// column runs a query of one text column on one of the night's databases.
func (n *night) column(dbName, query string) []string {
	n.t.Helper()
	rows, err := n.db(dbName).Query(query)
	if err != nil {
		n.t.Fatalf("%s: %v", dbName, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			n.t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		n.t.Fatal(err)
	}
	return out
}

// mailFiles reads the mail folder as chaos.MailFiles does.
func (n *night) mailFiles() []string {
	n.t.Helper()
	out, err := chaos.MailFiles(filepath.Join(n.dir, "mail"))
	if err != nil {
		n.t.Fatalf("mail folder: %v", err)
	}
	return out
}

// diffOutcomes names every difference between a night and the reference.
func diffOutcomes(got, want nightOutcome) []string {
	d, _ := chaos.Compare(got, want)
	return d
}

// reference is the uninterrupted night every crash night must equal, built once per test
// binary by the first test that needs it.
var reference struct {
	once    sync.Once
	outcome *nightOutcome
	truth   recon.Truth
}

func referenceNight(t *testing.T) (nightOutcome, recon.Truth) {
	t.Helper()
	reference.once.Do(func() {
		n := newLoggedNight(t)
		n.start()
		n.startRun()
		rec := n.waitStatus(runLimit, kc.Done)
		n.assertNight(rec, 0)
		o := n.outcome(rec)
		n.stop()
		if !t.Failed() {
			reference.outcome, reference.truth = &o, n.truth
		}
	})
	if reference.outcome == nil {
		t.Fatal("the uninterrupted reference night failed (see the test that built it first)")
	}
	return *reference.outcome, reference.truth
}

// crashAndRestart starts the run under fault (an @once exit), waits for the process to die
// of it, restarts with the same faults, and returns what the finished run left. A fault
// that never fires fails the test as soon as the run ends without it.
func (n *night) crashAndRestart(fault string) nightOutcome {
	n.t.Helper()
	n.start("CAIRN_FAULTS=" + fault)
	n.startRun()
	n.waitExit(fault)
	n.start("CAIRN_FAULTS=" + fault)
	rec := n.waitStatus(runLimit, kc.Done)
	return n.outcome(rec)
}

// waitExit waits for the running dev process to exit of fault, or fails when the run ends
// (done or handed over) and the process goes on living.
func (n *night) waitExit(fault string) {
	n.t.Helper()
	type exit struct {
		code int
		err  error
	}
	exited := make(chan exit, 1)
	dev := n.dev
	go func() {
		code, err := dev.Wait(runLimit)
		exited <- exit{code, err}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), runLimit)
	defer cancel()
	kv, err := n.js.KeyValue(ctx, assets.BucketRuns)
	if err != nil {
		n.t.Fatal(err)
	}
	w, err := kv.Watch(ctx, runID)
	if err != nil {
		n.t.Fatal(err)
	}
	defer w.Stop()
	var ended <-chan time.Time // armed when the run ends: the fault may still be on its way
	var e exit
wait:
	for {
		select {
		case e = <-exited:
			break wait
		case u := <-w.Updates():
			if u == nil || u.Operation() != jetstream.KeyValuePut || ended != nil {
				continue
			}
			if r, err := kc.Decode(u.Value()); err == nil && (r.Status == kc.Done || r.Status == kc.HandedOver) {
				ended = time.After(10 * time.Second)
			}
		case <-ended:
			n.t.Fatalf("the run ended and the process lives on: %s never fired (log %s)", fault, dev.Log)
		case <-ctx.Done():
			n.t.Fatalf("cairn dev did not exit of %s within %s (log %s)", fault, runLimit, dev.Log)
		}
	}
	if e.err != nil {
		n.t.Fatal(e.err)
	}
	if e.code != faults.ExitCode {
		n.t.Fatalf("cairn dev exited %d, want %d from the injected fault (log %s)", e.code, faults.ExitCode, dev.Log)
	}
	if !faults.Fired(filepath.Join(n.dir, "faults"), fault) {
		n.t.Fatalf("the @once marker of %s is missing: the fault never fired", fault)
	}
}

// boundaryFaults crash at every step boundary: before and after the commit, and before the
// next step's event (report has none).
func boundaryFaults() []string {
	var out []string
	for _, s := range job.Pipeline.Steps {
		out = append(out, s.Name+"."+faults.BeforeCommit+"=exit@once", s.Name+"."+faults.AfterCommit+"=exit@once")
		if s.Name != job.Report {
			out = append(out, s.Name+"."+faults.BeforeNextPublish+"=exit@once")
		}
	}
	return out
}

// writeFaults crash at each point around writes ns of step.
func writeFaults(step string, points []string, ns ...int) []string {
	var out []string
	for _, p := range points {
		for _, n := range ns {
			out = append(out, fmt.Sprintf("%s.%s.%d=exit@once", step, p, n))
		}
	}
	return out
}

func upTo(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i + 1
	}
	return out
}

// runMatrix runs one crash night per fault, two at a time, and compares each with the
// uninterrupted night.
func runMatrix(t *testing.T, want nightOutcome, list []string) { runMatrixOf(t, want, list, nil) }

// runMatrixOf is runMatrix with setup run on each night before its first start (nil: none).
func runMatrixOf(t *testing.T, want nightOutcome, list []string, setup func(*night)) {
	t.Helper()
	for _, fault := range list {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			takeNightSlot(t)
			began := time.Now()
			n := newLoggedNight(t)
			if setup != nil {
				setup(n)
			}
			got := n.crashAndRestart(fault)
			w := want
			if fault == job.Fetch+"."+faults.BeforeCommit+"=exit@once" {
				// Inherent: fetch died before its commit, so it saved nothing and its restart
				// loads every document again (WORKLOAD.md: once per fetch attempt that died).
				w.DocumentReads = 2 * want.DocumentReads
			}
			for _, d := range diffOutcomes(got, w) {
				t.Error(d)
			}
			t.Logf("%s: crash, restart and compare took %s", fault, time.Since(began).Round(time.Millisecond))
		})
	}
}

// The crash matrix, sampled: every step boundary, and entries first / 24 / last of the
// ledger and the stock, first / middle / last of the debit notes.
func TestCrashMatrix(t *testing.T) {
	t.Parallel() // beside the waiting tests; its nights take the night slots
	want, truth := referenceNight(t)
	writes := []string{faults.BeforeWrite, faults.AfterWrite}
	entries, notes := len(truth.Adjustments), len(truth.DebitNotes)
	list := boundaryFaults()
	list = append(list, writeFaults(job.PostLedger, writes, 1, 24, entries)...)
	list = append(list, writeFaults(job.UpdateStock, writes, 1, 24, entries)...)
	list = append(list, writeFaults(job.DebitNotes, writes, 1, (notes+1)/2, notes)...)
	// The outbox sender dies before a delivery, and after one before its sent mark.
	list = append(list, writeFaults(outbox.FaultStep, []string{faults.BeforeDeliver, faults.AfterDeliver}, 1, notes+1)...)
	runMatrix(t, want, list)
}

// The full crash matrix: every boundary and every write of every writing step, before it,
// after it, and with its reply lost. It runs behind `make e2e-full`.
func TestCrashMatrixFull(t *testing.T) {
	t.Parallel()
	if os.Getenv("CAIRN_E2E_FULL") != "1" {
		t.Skip("the full crash matrix runs with CAIRN_E2E_FULL=1: make e2e-full")
	}
	want, truth := referenceNight(t)
	points := []string{faults.BeforeWrite, faults.AfterWrite, faults.LostReply}
	list := boundaryFaults()
	list = append(list, writeFaults(job.PostLedger, points, upTo(len(truth.Adjustments))...)...)
	list = append(list, writeFaults(job.UpdateStock, points, upTo(len(truth.Adjustments))...)...)
	list = append(list, writeFaults(job.DebitNotes, points, upTo(len(truth.DebitNotes))...)...)
	runMatrix(t, want, list)
}

// A lost reply: write 24 lands and its reply is lost; the in-process retry posts it again
// under the same key, and the store keeps one row.
func TestLostReply(t *testing.T) {
	t.Parallel()
	for _, step := range []string{job.PostLedger, job.UpdateStock} {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			takeNightSlot(t)
			fault := step + "." + faults.LostReply + ".24=error:temporary@once"
			n := newLoggedNight(t)
			n.start("CAIRN_FAULTS=" + fault)
			n.startRun()
			rec := n.waitStatus(runLimit, kc.Done)
			if !faults.Fired(filepath.Join(n.dir, "faults"), fault) {
				t.Fatalf("the @once marker of %s is missing: the fault never fired", fault)
			}
			n.assertNight(rec, 0)
			if got := n.count("ledger.db", "ledger_entries"); got != len(n.truth.Adjustments) {
				t.Errorf("ledger rows %d, want %d", got, len(n.truth.Adjustments))
			}
			if got := n.count("erp.db", "stock_adjustments"); got != len(n.truth.Adjustments) {
				t.Errorf("stock adjustments %d, want %d", got, len(n.truth.Adjustments))
			}
		})
	}
}

func (n *night) count(dbName, table string) int {
	n.t.Helper()
	var c int
	if err := n.db(dbName).QueryRow(`SELECT count(*) FROM ` + table).Scan(&c); err != nil {
		n.t.Fatalf("counting %s: %v", table, err)
	}
	return c
}

const crashAt24 = "post-ledger.before-write.24=exit@once"

// A checkpoint damaged at rest: the run is not resumed, the record is left as it is, nothing
// more is written, and the handover note names the damage.
func TestCorruptCheckpoint(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newLoggedNight(t)
	n.start("CAIRN_FAULTS=" + crashAt24)
	n.startRun()
	n.waitExit(crashAt24)
	if got := n.count("ledger.db", "ledger_entries"); got != 23 {
		t.Fatalf("after the crash the ledger holds %d rows, want 23", got)
	}

	// Damage the record with no Cairn process running: a plain server on the same storage.
	var damaged []byte
	var rev uint64
	n.withServer(func(kv jetstream.KeyValue) {
		ctx := context.Background()
		e, err := kv.Get(ctx, runID)
		if err != nil {
			t.Fatal(err)
		}
		damaged = changeDigit(t, e.Value(), `"next_action":"`)
		if !json.Valid(damaged) {
			t.Fatalf("the damaged record is not JSON: %s", damaged)
		}
		if _, err := kc.Decode(damaged); !errors.Is(err, kc.ErrCorrupt) {
			t.Fatalf("Decode of the damaged record = %v, want ErrCorrupt", err)
		}
		if rev, err = kv.Put(ctx, runID, damaged); err != nil {
			t.Fatal(err)
		}
	})

	n.start("CAIRN_FAULTS=" + crashAt24)
	note := n.waitNote(runLimit)
	t.Logf("handover note: %s", note.Error)
	if note.RunID != runID || !strings.Contains(note.Error, kc.ErrCorrupt.Error()) || !strings.Contains(note.Error, "sum") {
		t.Errorf("handover note %+v, want one for %s naming the sum mismatch", note, runID)
	}
	kv, err := n.js.KeyValue(context.Background(), assets.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	if e.Revision() != rev || !bytes.Equal(e.Value(), damaged) {
		t.Errorf("the damaged record was written: revision %d (damaged at %d)\n%s", e.Revision(), rev, e.Value())
	}
	if got := n.count("ledger.db", "ledger_entries"); got != 23 {
		t.Errorf("the ledger holds %d rows, want the 23 of before the crash", got)
	}
	if got := n.count("erp.db", "stock_adjustments"); got != 0 {
		t.Errorf("%d stock adjustments written for a run that was not resumed", got)
	}
}

// changeDigit changes the first digit after marker, so the JSON stays valid and only the
// sum can tell.
func changeDigit(t *testing.T, b []byte, marker string) []byte {
	t.Helper()
	at := bytes.Index(b, []byte(marker))
	if at < 0 {
		t.Fatalf("no %s in the record %s", marker, b)
	}
	out := bytes.Clone(b)
	for i := at + len(marker); i < len(out) && out[i] != '"'; i++ {
		if out[i] >= '0' && out[i] <= '9' {
			out[i] = '0' + (out[i]-'0'+1)%10
			return out
		}
	}
	t.Fatalf("no digit in the value after %s in %s", marker, b)
	return nil
}

// withServer runs fn against the night's NATS storage under a plain nats-server, with no
// Cairn process running, and stops the server before returning.
func (n *night) withServer(fn func(runs jetstream.KeyValue)) {
	n.t.Helper()
	u, err := url.Parse(n.url)
	if err != nil {
		n.t.Fatal(err)
	}
	host, portText, err := net.SplitHostPort(u.Host)
	if err != nil {
		n.t.Fatal(err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		n.t.Fatal(err)
	}
	s, err := server.NewServer(&server.Options{ServerName: "cairn-dev", Host: host, Port: port, JetStream: true,
		StoreDir: filepath.Join(n.dir, "nats"), NoSigs: true, NoLog: true})
	if err != nil {
		n.t.Fatal(err)
	}
	go s.Start()
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	if !s.ReadyForConnections(15 * time.Second) {
		n.t.Fatal("nats-server on the night's storage did not start")
	}
	nc, err := nats.Connect(n.url)
	if err != nil {
		n.t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		n.t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), assets.BucketRuns)
	if err != nil {
		n.t.Fatal(err)
	}
	fn(kv)
}

// waitNote watches cairn-handovers until the run's note appears.
func (n *night) waitNote(limit time.Duration) runner.HandoverNote {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	kv, err := n.js.KeyValue(ctx, assets.BucketHandovers)
	if err != nil {
		n.t.Fatal(err)
	}
	w, err := kv.Watch(ctx, runID)
	if err != nil {
		n.t.Fatal(err)
	}
	defer w.Stop()
	for e := range w.Updates() {
		if e == nil || e.Operation() != jetstream.KeyValuePut {
			continue
		}
		var note runner.HandoverNote
		if err := json.Unmarshal(e.Value(), &note); err != nil {
			n.t.Fatalf("handover note %s: %v", e.Value(), err)
		}
		return note
	}
	n.t.Fatalf("no handover note for %s within %s (log %s)", runID, limit, n.dev.Log)
	return runner.HandoverNote{}
}

// The source changed between the crash and the restart: the run is handed over before it
// writes anything more, and the note names the document.
func TestChangedSource(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(t *testing.T, dir string, truth recon.Truth) string // returns the invoice it touched
	}{
		{"rewritten invoice", func(t *testing.T, dir string, truth recon.Truth) string {
			no := truth.Adjustments[0].InvoiceNo
			path := filepath.Join(dir, no+".txt")
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, append(b, "Note: revised copy\n"...), 0o644); err != nil {
				t.Fatal(err)
			}
			return no
		}},
		{"new invoice", func(t *testing.T, dir string, truth recon.Truth) string {
			from := truth.Adjustments[0].InvoiceNo
			no := "INV-20261013-9999"
			b, err := os.ReadFile(filepath.Join(dir, from+".txt"))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, no+".txt"), bytes.ReplaceAll(b, []byte(from), []byte(no)), 0o644); err != nil {
				t.Fatal(err)
			}
			return no
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			takeNightSlot(t)
			n := newLoggedNight(t)
			n.start("CAIRN_FAULTS=" + crashAt24)
			n.startRun()
			n.waitExit(crashAt24)
			no := tt.change(t, recon.NightDir(filepath.Join(n.dir, "inbox"), warehouse, date), n.truth)
			n.start("CAIRN_FAULTS=" + crashAt24)
			rec := n.waitStatus(runLimit, kc.HandedOver, kc.Done)
			if rec.Status != kc.HandedOver {
				t.Fatalf("run %s after %s changed, want handed_over", rec.Status, no)
			}
			if s := rec.Step(job.PostLedger); s.Status != kc.Failed {
				t.Errorf("post-ledger %s, want failed", s.Status)
			}
			note := n.waitNote(time.Minute)
			t.Logf("handover note: %s", note.Error)
			if !strings.Contains(note.Error, no) || rec.Handover == nil || *rec.Handover != note.ID {
				t.Errorf("handover note %+v (record's %v), want it to name %s", note, rec.Handover, no)
			}
			if got := n.count("ledger.db", "ledger_entries"); got != 23 {
				t.Errorf("the ledger holds %d rows, want the 23 of before the crash", got)
			}
			if got := n.count("erp.db", "stock_adjustments"); got != 0 {
				t.Errorf("%d stock adjustments written after the source changed", got)
			}
		})
	}
}
