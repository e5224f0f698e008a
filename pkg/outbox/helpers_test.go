package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/outbox"
)

// fixture is an embedded nats-server with the outbox assets, as the framework's
// asset package creates them.
type fixture struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	cons   jetstream.Consumer
	kv     jetstream.KeyValue
}

func setup(t *testing.T) *fixture {
	t.Helper()
	js := natstest.JetStream(t)
	ctx := testContext(t)
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:      outbox.DefaultStream,
		Subjects:  []string{"cairn.outbox.>"},
		Retention: jetstream.LimitsPolicy,
		Storage:   jetstream.FileStorage,
	})
	if err != nil {
		t.Fatalf("creating stream: %v", err)
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: outbox.DefaultBucket, History: 1})
	if err != nil {
		t.Fatalf("creating bucket: %v", err)
	}
	f := &fixture{js: js, stream: stream, kv: kv}
	f.cons = f.consumer(t, outbox.DefaultConsumer)
	return f
}

// consumer creates a durable as the asset package defines outbox-sender; a second one
// stands for a redelivery of the same stream messages (or another sender).
func (f *fixture) consumer(t *testing.T, name string) jetstream.Consumer {
	t.Helper()
	var cc jetstream.ConsumerConfig
	for _, c := range (assets.Config{Steps: []string{"s"}}).Consumers() {
		if c.Config.Durable == assets.ConsumerOutbox {
			cc = c.Config
		}
	}
	cc.Durable, cc.Replicas = name, 0
	cons, err := f.js.CreateOrUpdateConsumer(testContext(t), outbox.DefaultStream, cc)
	if err != nil {
		t.Fatalf("creating consumer %q: %v", name, err)
	}
	return cons
}

// sender builds a Sender on the consumer named in c (default outbox-sender).
func (f *fixture) sender(t *testing.T, c outbox.SenderConfig) *outbox.Sender {
	t.Helper()
	c.JS = f.js
	if c.Logger == nil {
		c.Logger = testLogger(t)
	}
	if c.Allow.From == "" && c.Allow.Webhook == "" && c.Allow.Mail == nil {
		c.Allow = anyMail
	}
	s, err := outbox.NewSender(c)
	if err != nil {
		t.Fatalf("NewSender: %v", err)
	}
	return s
}

func (f *fixture) queue(t *testing.T, msgs ...outbox.Message) {
	t.Helper()
	for _, m := range msgs {
		if err := outbox.Queue(testContext(t), f.js, m); err != nil {
			t.Fatalf("Queue %q: %v", m.Key, err)
		}
	}
}

// next fetches the next message of cons, failing the test if none comes.
func next(t *testing.T, cons jetstream.Consumer) jetstream.Msg {
	t.Helper()
	msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatalf("fetching from %q: %v", cons.CachedInfo().Name, err)
	}
	return msg
}

// handleAll drives one Handle per queued message, in stream order.
func handleAll(t *testing.T, s *outbox.Sender, cons jetstream.Consumer, n int) {
	t.Helper()
	for range n {
		if err := s.Handle(testContext(t), next(t, cons)); err != nil {
			t.Fatalf("Handle: %v", err)
		}
	}
}

func (f *fixture) markOf(t *testing.T, m outbox.Message) outbox.Mark {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	mark, err := outbox.MarkOf(ctx, f.kv, m.RunID, m.Key)
	if err != nil {
		t.Fatalf("MarkOf %q: %v", m.Key, err)
	}
	return mark
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// anyMail allows the test messages' mail: from their sender to anyone, and no webhook.
var anyMail = outbox.Allow{From: "Cairn <cairn@example.com>", Mail: func(string, string) bool { return true }}

var queuedAt = time.Date(2026, 10, 13, 22, 30, 0, 0, time.FixedZone("IST", 5*3600+1800))

func message(runID, kind, key string) outbox.Message {
	return outbox.Message{
		Key:      key,
		RunID:    runID,
		Kind:     kind,
		Step:     "debit-notes",
		Token:    1876,
		From:     "Cairn <cairn@example.com>",
		To:       []string{"accounts@supplier.example"},
		Subject:  "Debit note " + key,
		Body:     "Claim for run " + runID + ".\nTotal: 482.50\n",
		QueuedAt: queuedAt,
	}
}

// mailServer is a real in-process SMTP server that records what it accepts.
type mailServer struct {
	addr string

	mu       sync.Mutex
	received []receivedMail
	refuse   error // returned from DATA while set

	down    atomic.Bool  // while set, every connection is closed before the greeting
	dropped atomic.Int64 // connections closed while down
}

// downListener closes the connections a mail server that is down would never answer.
type downListener struct {
	net.Listener
	ms *mailServer
}

func (l downListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil || !l.ms.down.Load() {
			return c, err
		}
		l.ms.dropped.Add(1)
		c.Close()
	}
}

type receivedMail struct {
	From string
	To   []string
	Data []byte
}

func startMailServer(t *testing.T) *mailServer {
	t.Helper()
	ms := &mailServer{}
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) {
		return &mailSession{server: ms}, nil
	}))
	srv.Domain = "localhost"
	srv.ErrorLog = log.New(io.Discard, "", 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening: %v", err)
	}
	ms.addr = ln.Addr().String()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(downListener{ln, ms}) }()
	t.Cleanup(func() {
		srv.Close()
		ln.Close() // in case Serve had not registered it yet
		if err := <-served; err != nil && !errors.Is(err, smtp.ErrServerClosed) {
			t.Errorf("smtp server: %v", err)
		}
	})
	return ms
}

func (ms *mailServer) setRefuse(err error) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	ms.refuse = err
}

func (ms *mailServer) mails() []receivedMail {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return append([]receivedMail(nil), ms.received...)
}

type mailSession struct {
	server *mailServer
	from   string
	to     []string
}

func (s *mailSession) Reset()        { s.from, s.to = "", nil }
func (s *mailSession) Logout() error { return nil }
func (s *mailSession) Mail(from string, _ *smtp.MailOptions) error {
	s.from = from
	return nil
}

func (s *mailSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.to = append(s.to, to)
	return nil
}

func (s *mailSession) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.server.mu.Lock()
	defer s.server.mu.Unlock()
	if s.server.refuse != nil {
		return s.server.refuse
	}
	s.server.received = append(s.server.received, receivedMail{From: s.from, To: s.to, Data: data})
	return nil
}
