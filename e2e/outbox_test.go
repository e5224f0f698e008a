package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/cairnhq/cairn/internal/stepevent"
	"github.com/cairnhq/cairn/pkg/assets"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// relay is a real SMTP server in the test process: it can be down (every connection closed
// before the greeting) or refuse one message key for good (550 at the end of DATA).
type relay struct {
	addr    string
	down    atomic.Bool
	dropped atomic.Int64 // connections closed while down

	mu       sync.Mutex
	refuse   string         // a key refused with 550 while set
	received map[string]int // X-Cairn-Key -> copies accepted
}

func startRelay(t *testing.T) *relay {
	t.Helper()
	r := &relay{received: map[string]int{}}
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return &relaySession{r: r}, nil }))
	srv.Domain = "localhost"
	srv.ErrorLog = log.New(io.Discard, "", 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = ln.Addr().String()
	go func() { _ = srv.Serve(relayListener{ln, r}) }()
	t.Cleanup(func() { srv.Close() })
	return r
}

func (r *relay) setRefuse(key string) { r.mu.Lock(); r.refuse = key; r.mu.Unlock() }

func (r *relay) copies() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.received))
	for k, v := range r.received {
		out[k] = v
	}
	return out
}

type relayListener struct {
	net.Listener
	r *relay
}

func (l relayListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil || !l.r.down.Load() {
			return c, err
		}
		l.r.dropped.Add(1)
		c.Close()
	}
}

type relaySession struct{ r *relay }

func (s *relaySession) Reset()                               {}
func (s *relaySession) Logout() error                        { return nil }
func (s *relaySession) Mail(string, *smtp.MailOptions) error { return nil }
func (s *relaySession) Rcpt(string, *smtp.RcptOptions) error { return nil }
func (s *relaySession) Data(rd io.Reader) error {
	b, err := io.ReadAll(rd)
	if err != nil {
		return err
	}
	key := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if k, ok := strings.CutPrefix(strings.TrimRight(sc.Text(), "\r"), "X-Cairn-Key: "); ok {
			key = k
			break
		}
	}
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	if key != "" && key == s.r.refuse {
		return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "mailbox unavailable"}
	}
	s.r.received[key]++
	return nil
}

// wantOnce checks that the relay took every debit note and the report of the night exactly once.
func (n *night) wantOnce(r *relay) {
	n.t.Helper()
	got := r.copies()
	want := map[string]bool{runID + ":report": true}
	for _, d := range n.truth.DebitNotes {
		want[runID+":debit:"+d.SupplierID] = true
	}
	for k := range want {
		if got[k] != 1 {
			n.t.Errorf("%s accepted %d times by the relay, want once", k, got[k])
		}
	}
	if len(got) != len(want) {
		n.t.Errorf("relay accepted %d keys %v, want the night's %d", len(got), got, len(want))
	}
}

// backlog scrapes cairn_outbox_backlog from /metrics; -1 when it cannot.
func backlog(addr string) float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "cairn_outbox_backlog "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// A relay that answers no connection for longer than the old delivery limit allowed (20
// deliveries of every message, here with a 100 ms backoff cap standing in for 5 s) loses no
// mail: the backlog shows in cairn_outbox_backlog and cairn status, and once the relay is
// back every message goes once and the run is done.
func TestRelayOutageLongerThanTheDeliveryLimitThenBack(t *testing.T) {
	t.Parallel() // mostly waiting (a stall, an outage, a grace): see TestMain
	r := startRelay(t)
	r.down.Store(true)
	n := newNight(t, 0)
	n.start("CAIRN_SMTP_ADDR="+r.addr, "CAIRN_OUTBOX_BACKOFF=100ms", anyPort)
	metrics := n.metricsAddr()
	n.startRun()
	msgs := int64(len(n.truth.DebitNotes) + 1)
	if !poll(runLimit, func() bool { return r.dropped.Load() > 20*msgs }) {
		t.Fatalf("the relay saw %d connections, want more than 20 for each of %d messages", r.dropped.Load(), msgs)
	}
	if rec := n.waitStatus(runLimit, kc.Finishing, kc.Done, kc.HandedOver); rec.Status != kc.Finishing {
		t.Fatalf("status %s during the outage, want finishing", rec.Status)
	}
	if got := backlog(metrics); got != float64(msgs) {
		t.Errorf("cairn_outbox_backlog = %v during the outage, want %d", got, msgs)
	}
	if out, _ := n.cli("status", runID); !strings.Contains(out, fmt.Sprintf("%d undelivered of %d queued", msgs, msgs)) {
		t.Errorf("cairn status does not show the undelivered mail:\n%s", out)
	}
	r.down.Store(false)
	n.waitStatus(runLimit, kc.Done)
	n.wantOnce(r)
}

// Past CAIRN_OUTBOX_STALL with the relay still down, the run is handed over naming every
// undelivered message; once the relay is back, cairn resume makes it done with each message
// sent once.
func TestOutboxStallHandsOverThenResumeSendsEachOnce(t *testing.T) {
	t.Parallel() // mostly waiting (a stall, an outage, a grace): see TestMain
	r := startRelay(t)
	r.down.Store(true)
	n := newNight(t, 0)
	n.start("CAIRN_SMTP_ADDR="+r.addr, "CAIRN_OUTBOX_BACKOFF=200ms", "CAIRN_OUTBOX_STALL=5s")
	n.startRun()
	if rec := n.waitStatus(runLimit, kc.HandedOver, kc.Done); rec.Status != kc.HandedOver {
		t.Fatalf("status %s, want handed_over", rec.Status)
	}
	note := n.waitNote(runLimit)
	want := []string{"report"}
	for _, d := range n.truth.DebitNotes {
		want = append(want, "debit:"+d.SupplierID)
	}
	for _, k := range want {
		if !strings.Contains(note.Error, k) {
			t.Errorf("handover note %q does not name %s", note.Error, k)
		}
	}
	r.down.Store(false)
	if out, code := n.cli("resume", runID, "--wait"); code != 0 {
		t.Fatalf("cairn resume (exit %d):\n%s", code, out)
	}
	n.waitStatus(runLimit, kc.Done)
	n.wantOnce(r)
}

// A message the relay refuses for good (550) hands its run over at once, naming the message
// and the error, while every other message goes; after the fix, cairn resume sends it once
// and the run is done.
func TestRefusedMailHandsOverThenResumeSendsItOnce(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	r := startRelay(t)
	n := newNight(t, 0)
	refused := runID + ":debit:" + n.truth.DebitNotes[0].SupplierID
	r.setRefuse(refused)
	n.start("CAIRN_SMTP_ADDR=" + r.addr)
	n.startRun()
	rec := n.waitStatus(runLimit, kc.HandedOver, kc.Done)
	if rec.Status != kc.HandedOver {
		t.Fatalf("status %s, want handed_over", rec.Status)
	}
	note := n.waitNote(runLimit)
	if !strings.Contains(note.Error, refused) || !strings.Contains(note.Error, "550") {
		t.Fatalf("handover note error %q: want it to name %s and the 550", note.Error, refused)
	}
	// The other messages go on after the handover (the sender sends each on its own): wait
	// for them, the refused one never among them.
	poll(30*time.Second, func() bool { return len(r.copies()) >= len(n.truth.DebitNotes) })
	if got := r.copies(); got[refused] != 0 || len(got) != len(n.truth.DebitNotes) {
		t.Fatalf("relay accepted %v before the fix: want every message but %s", got, refused)
	}
	r.setRefuse("")
	if out, code := n.cli("resume", runID, "--wait"); code != 0 {
		t.Fatalf("cairn resume (exit %d):\n%s", code, out)
	}
	n.waitStatus(runLimit, kc.Done)
	n.wantOnce(r)
}

// The notice of a run whose record is corrupt is delivered: it is the run a person must look at.
func TestHandoverNoticeOfACorruptRecordIsDelivered(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newNight(t, 0)
	n.start("CAIRN_NOTIFY_EMAIL=ops@cairn.local")
	ctx := context.Background()
	kv, err := n.js.KeyValue(ctx, assets.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	const bad = "run-corrupt"
	if _, err := kv.Put(ctx, bad, []byte(`{"schema":1,"run_id":"run-corrupt","created_at":"2000-01-01T00:00:00Z","status":"running","sum":"sha256:00"}`)); err != nil {
		t.Fatal(err)
	}
	// A step event for it: the step finds the record untrusted and hands it over by its note.
	if err := stepevent.Publish(ctx, n.js, assets.Default, "/cairn/test", bad, "fetch", 0, 1, time.Now()); err != nil {
		t.Fatal(err)
	}
	key := bad + ":handover:record:mail"
	if !poll(runLimit, func() bool { return fileExists(filepath.Join(n.dir, "mail"), key) }) {
		t.Fatalf("the notice %s was never delivered (mail %v)", key, n.mailKeys())
	}
	if body := n.mailByKey(key); !strings.Contains(body, "run-corrupt needs a person") {
		t.Fatalf("notice:\n%s", body)
	}
}

func fileExists(dir, key string) bool {
	h := sha256.Sum256([]byte(key))
	_, err := os.Stat(filepath.Join(dir, hex.EncodeToString(h[:])+".eml"))
	return err == nil
}
