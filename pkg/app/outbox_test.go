package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/mail"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/apptest"
	"github.com/cairnhq/cairn/internal/eventually"
	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/outbox"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/runner"
)

// mailbox is a real SMTP server on loopback that counts the mails it accepts by their
// X-Cairn-Key, and keeps their bodies.
type mailbox struct {
	addr   string
	mu     sync.Mutex
	byKey  map[string]int
	bodies map[string]string
}

func startMailbox(t *testing.T) *mailbox {
	t.Helper()
	mb := &mailbox{byKey: map[string]int{}, bodies: map[string]string{}}
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return &mailboxSession{mb: mb}, nil }))
	srv.Domain = "localhost"
	srv.ErrorLog = log.New(io.Discard, "", 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mb.addr = ln.Addr().String()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		ln.Close()
		if err := <-served; err != nil && !errors.Is(err, smtp.ErrServerClosed) {
			t.Errorf("smtp server: %v", err)
		}
	})
	return mb
}

func (mb *mailbox) counts() map[string]int {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	out := make(map[string]int, len(mb.byKey))
	for k, n := range mb.byKey {
		out[k] = n
	}
	return out
}

type mailboxSession struct{ mb *mailbox }

func (s *mailboxSession) Reset()                               {}
func (s *mailboxSession) Logout() error                        { return nil }
func (s *mailboxSession) Mail(string, *smtp.MailOptions) error { return nil }
func (s *mailboxSession) Rcpt(string, *smtp.RcptOptions) error { return nil }
func (s *mailboxSession) Data(r io.Reader) error {
	raw, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	m, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(m.Body)
	key := m.Header.Get("X-Cairn-Key")
	s.mb.mu.Lock()
	defer s.mb.mu.Unlock()
	s.mb.byKey[key]++
	s.mb.bodies[key] = string(body)
	return nil
}

const noteFrom = "Cairn <cairn@example.com>"

// notes reads a run's items, then sends one note per item through the pipeline's outbox.
// notify's first attempt fails for now after queueing two of its three notes, so it is tried
// again, and queues all three again under the same keys.
func notes(js jetstream.JetStream, name, keys, relay string, attempts *atomic.Int32) app.Config {
	notify := sentFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
		n := attempts.Add(1)
		b, err := a.Input(ctx, "items")
		if err != nil {
			return nil, err
		}
		var items []string
		if err := json.Unmarshal(b, &items); err != nil {
			return nil, err
		}
		var sent []string
		for i, it := range items {
			m := outbox.Message{Key: a.RunID + ":note:" + it, Kind: "note", From: noteFrom, To: []string{it + "@example.com"},
				Subject: "Note " + it, Body: "pipeline " + name + ", item " + it + "\n"}
			if err := a.Queue(ctx, m); err != nil {
				return nil, err
			}
			sent = append(sent, m.Key)
			if n == 1 && i == 1 {
				return nil, runner.Temporary(errors.New("the list of items went away for now (injected)"))
			}
		}
		return output(sent), nil
	})
	read := stepFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
		return output(strings.Split(a.Params.String("items"), ",")), nil
	})
	return app.Config{
		JS: js, KeysDir: keys, Heartbeat: 200 * time.Millisecond, Lease: time.Second, TakeoverGap: 100 * time.Millisecond,
		Pipeline: pipeline.Definition{Name: name, Input: []string{"items"}, Steps: []pipeline.Step{
			{Name: "items", Kind: pipeline.SourceRead, Recovery: "read again"},
			{Name: "notify", Kind: pipeline.OutsideMessage, Leased: true, Irreversible: true, Effects: "mail",
				Key: "<run>:note:<item>, the outbox's marks", Recovery: "queued again under the same keys; the outbox sends each once"},
		}},
		Steps: map[string]runner.Step{"items": read, "notify": notify},
		Outbox: &outbox.SenderConfig{Transport: outbox.SMTPTransport{Addr: relay}, MaxBackoff: 500 * time.Millisecond,
			Allow: outbox.Allow{From: noteFrom, Mail: func(kind, to string) bool { return kind == "note" && strings.HasSuffix(to, "@example.com") }}},
	}
}

// outboxSettled waits until the pipeline's outbox-sender durable has nothing left to hand
// out or to be acknowledged: no copy can reach the relay after it.
func outboxSettled(ctx context.Context, t *testing.T, js jetstream.JetStream, name string) {
	t.Helper()
	sp := assets.MustSpace(name)
	cons, err := js.Consumer(ctx, sp.Stream(assets.StreamOutbox), assets.ConsumerOutbox)
	if err != nil {
		t.Fatal(err)
	}
	eventually.That(t, time.Minute, name+"'s outbox settled", func() error {
		info, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumPending != 0 || info.NumAckPending != 0 {
			return fmt.Errorf("%d pending, %d pending ack", info.NumPending, info.NumAckPending)
		}
		return nil
	})
}

func natsFor(t *testing.T) jetstream.JetStream {
	t.Helper()
	srv, err := app.Embedded("outbox", "127.0.0.1", -1, filepath.Join(t.TempDir(), "nats"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// checkSentOnce checks that pipeline name's run r-1 is done, its step notify took two
// attempts, the outbox holds both attempts' copies (2 + 3), and relay received each of the
// three notes exactly once, with the pipeline's own text.
func checkSentOnce(ctx context.Context, t *testing.T, js jetstream.JetStream, name string, mb *mailbox, attempts *atomic.Int32) {
	t.Helper()
	rec, err := app.Wait(ctx, js, name, "r-1")
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if rec.Status != kc.Done || rec.Steps["notify"].Status != kc.Verified {
		t.Fatalf("%s's r-1: %s, notify %s; want done, verified (%s)", name, rec.Status, rec.Steps["notify"].Status, rec.NextAction)
	}
	if n := attempts.Load(); n != 2 {
		t.Errorf("%s: notify ran %d attempts, want 2 (one failed after queueing two notes)", name, n)
	}
	outboxSettled(ctx, t, js, name)
	st, err := js.Stream(ctx, assets.MustSpace(name).Stream(assets.StreamOutbox))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 5 {
		t.Errorf("%s's outbox holds %d messages, want 5: the failed attempt's 2 and the retry's 3", name, info.State.Msgs)
	}
	got := mb.counts()
	want := map[string]int{"r-1:note:a": 1, "r-1:note:b": 1, "r-1:note:c": 1}
	if len(got) != len(want) {
		t.Errorf("%s's relay received %v, want each of %v once", name, got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s's relay received %s %d times, want %d", name, k, got[k], n)
		}
	}
	mb.mu.Lock()
	defer mb.mu.Unlock()
	for k, body := range mb.bodies {
		if !strings.HasPrefix(body, "pipeline "+name+",") {
			t.Errorf("%s's relay received %s with another pipeline's text %q", name, k, body)
		}
	}
}

// A hosted pipeline's step queues one note per item through its attempt; its first attempt
// fails for now after queueing two, and its retry queues all three again. The pipeline's
// outbox sender, run by app.Run, delivers each note to a real SMTP server exactly once, and
// the run ends done once the last is sent.
func TestOutboxSendsEachMessageOnce(t *testing.T) {
	js := natsFor(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	mb := startMailbox(t)
	var attempts atomic.Int32
	cfg := notes(js, "notes", filepath.Join(t.TempDir(), "keys"), mb.addr, &attempts)
	if err := app.Init(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	running, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(running, cfg) }()
	if err := app.Start(ctx, js, "notes", "r-1", map[string]any{"items": "a,b,c"}); err != nil {
		t.Fatal(err)
	}
	checkSentOnce(ctx, t, js, "notes", mb, &attempts)
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Two pipelines on one NATS, each with its own relay, send runs of the same run id and notes
// of the same keys: each relay receives its own pipeline's three notes once, and never the
// other's. Each outbox sender runs alone (app.Run with app.OutboxSender), apart from the
// pipeline's other services.
func TestTwoPipelinesOwnOutboxes(t *testing.T) {
	js := natsFor(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	running, stop := context.WithCancel(ctx)
	defer stop()
	names := []string{"alpha", "beta"}
	boxes := map[string]*mailbox{}
	attempts := map[string]*atomic.Int32{}
	done := make(chan error, 2*len(names))
	for _, p := range names {
		boxes[p], attempts[p] = startMailbox(t), &atomic.Int32{}
		cfg := notes(js, p, filepath.Join(t.TempDir(), "keys-"+p), boxes[p].addr, attempts[p])
		if err := app.Init(ctx, cfg); err != nil {
			t.Fatalf("init %s: %v", p, err)
		}
		go func() { done <- app.Run(running, cfg, "items", "notify", app.Supervisor) }()
		go func() { done <- app.Run(running, cfg, app.OutboxSender) }()
	}
	for _, p := range names {
		if err := app.Start(ctx, js, p, "r-1", map[string]any{"items": "a,b,c"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range names {
		checkSentOnce(ctx, t, js, p, boxes[p], attempts[p])
	}
	if _, err := js.Stream(ctx, assets.StreamOutbox); err == nil {
		t.Errorf("stream %s exists: a hosted pipeline queued on the default space's outbox", assets.StreamOutbox)
	}
	stop()
	for range 2 * len(names) {
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}
}

// A pipeline without Outbox has no outbox sender to run; an Outbox that names another stream
// or no transport is refused, naming the problem.
func TestOutboxConfigRefused(t *testing.T) {
	js := natsFor(t)
	ctx := t.Context()
	var n atomic.Int32
	cfg := notes(js, "plain", t.TempDir(), "127.0.0.1:1", &n)
	cfg.Outbox = nil
	if err := app.Run(ctx, cfg, app.OutboxSender); err == nil || !strings.Contains(err.Error(), `no service "outbox-sender"`) {
		t.Errorf("Run of the outbox sender of a pipeline without Outbox: %v", err)
	}
	for what, bad := range map[string]outbox.SenderConfig{
		"Stream":    {Transport: outbox.SMTPTransport{Addr: "127.0.0.1:1"}, Stream: "CAIRN_OUTBOX", Allow: outbox.Allow{From: noteFrom}},
		"Transport": {Allow: outbox.Allow{From: noteFrom}},
	} {
		cfg.Outbox = &bad
		if err := app.Init(ctx, cfg); err == nil || !strings.Contains(err.Error(), what) {
			t.Errorf("Init with an Outbox that sets %s: %v", what, err)
		}
	}
}

// The pipeline's own NATS user (its assets.Permissions, as `cairn permissions` prints them)
// may queue on, consume and mark its own outbox: the run, its notes sent through its outbox
// sender, ends done with no permissions violation.
func TestOutboxPermissions(t *testing.T) {
	dir := t.TempDir()
	var attempts atomic.Int32
	perm := notes(nil, "perm", "", "", &attempts).Assets().Permissions()
	un := startUsersNATS(t, map[string]assets.Permissions{"perm": perm})
	admin, own := un.connect("admin"), un.connect("perm")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	mb := startMailbox(t)
	keys := filepath.Join(dir, "keys")
	if err := app.Init(ctx, notes(admin, "perm", keys, mb.addr, &attempts)); err != nil {
		t.Fatal(err)
	}
	running, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(running, notes(own, "perm", keys, mb.addr, &attempts)) }()
	if err := app.Start(ctx, admin, "perm", "r-1", map[string]any{"items": "a,b,c"}); err != nil {
		t.Fatal(err)
	}
	checkSentOnce(ctx, t, admin, "perm", mb, &attempts)
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if v := un.violations(false); len(v) > 0 {
		t.Errorf("the pipeline's services were refused: %v", v)
	}
}

// Attempt.Queue checks every message before it queues any: a key that does not begin with
// the run id, a message naming another run, or one that breaks outbox.Message's own rules
// is refused (outbox.ErrInvalid, naming the key), and nothing is queued.
func TestAttemptQueueRefusesBadMessages(t *testing.T) {
	js := natsFor(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var n atomic.Int32
	cfg := notes(js, "bad", filepath.Join(t.TempDir(), "keys"), "127.0.0.1:1", &n)
	got := make(chan error, 1)
	cfg.Steps["notify"] = sentFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
		good := outbox.Message{Key: a.RunID + ":note:a", Kind: "note", From: noteFrom, To: []string{"a@example.com"}, Subject: "Note a"}
		noRun, otherRun, noTo := good, good, good
		noRun.Key = "note:b"
		otherRun.Key, otherRun.RunID = a.RunID+":note:c", "r-2"
		noTo.Key, noTo.To = a.RunID+":note:d", nil
		select {
		case got <- a.Queue(ctx, good, noRun, otherRun, noTo):
		default:
		}
		return output([]string{}), nil
	})
	if err := app.Init(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	running, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(running, cfg) }()
	if err := app.Start(ctx, js, "bad", "r-1", map[string]any{"items": "a"}); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-got:
	case <-ctx.Done():
		t.Fatal("the step never ran")
	}
	if !errors.Is(err, outbox.ErrInvalid) {
		t.Fatalf("Queue: %v, want outbox.ErrInvalid", err)
	}
	for _, want := range []string{`"note:b": key does not begin with the run id`, `"r-1:note:c": run_id "r-2" is not the attempt's run`, `"r-1:note:d": to names nobody`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Queue: %v; want it to say %s", err, want)
		}
	}
	if _, err := app.Wait(ctx, js, "bad", "r-1"); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, assets.MustSpace("bad").Stream(assets.StreamOutbox))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Errorf("the outbox holds %d messages, want none: a refused batch queues nothing", info.State.Msgs)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A note the sender refuses (its recipient not allowed) hands the run over; once the allow
// list takes it, a resume queues the undelivered note again in the pipeline's own outbox,
// and it is sent once.
func TestOutboxRefusedThenResumed(t *testing.T) {
	js := natsFor(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	mb := startMailbox(t)
	var attempts atomic.Int32
	attempts.Store(1) // no injected failure: notify queues all three at once
	cfg := notes(js, "refusals", filepath.Join(t.TempDir(), "keys"), mb.addr, &attempts)
	var allowB atomic.Bool
	cfg.Outbox.Allow.Mail = func(kind, to string) bool {
		return kind == "note" && strings.HasSuffix(to, "@example.com") && (to != "b@example.com" || allowB.Load())
	}
	apptest.Host(t.Context(), t, cfg)
	if err := app.Start(ctx, js, "refusals", "r-1", map[string]any{"items": "a,b,c"}); err != nil {
		t.Fatal(err)
	}
	rec, err := app.Wait(ctx, js, "refusals", "r-1")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != kc.HandedOver {
		t.Fatalf("r-1 is %s (%s), want handed over for the refused note", rec.Status, rec.NextAction)
	}
	allowB.Store(true)
	if err := app.Command(ctx, js, "refusals", "r-1", events.VerbResume, "resume-1", events.Command{}); err != nil {
		t.Fatal(err)
	}
	store, err := kc.Open(ctx, js, assets.MustSpace("refusals").Bucket(assets.BucketRuns))
	if err != nil {
		t.Fatal(err)
	}
	waitRecord(ctx, t, store, "r-1", "done after the resume", func(r *kc.Record) bool { return r.Status == kc.Done })
	outboxSettled(ctx, t, js, "refusals")
	got := mb.counts()
	for _, k := range []string{"r-1:note:a", "r-1:note:b", "r-1:note:c"} {
		if got[k] != 1 {
			t.Errorf("the relay received %s %d times, want once (all: %v)", k, got[k], got)
		}
	}
}
