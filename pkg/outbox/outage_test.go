package outbox_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/eventually"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/faults"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/outbox"
)

// run starts s.Run and returns a stop that waits for it to return nil.
func run(t *testing.T, s *outbox.Sender) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v, want nil on a clean stop", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	}
	t.Cleanup(stop)
	return stop
}

// A relay that answers no connection for longer than the old delivery limit (20 deliveries
// of each message) loses nothing: every message is tried for as long as the outage lasts,
// and goes exactly once when the relay is back.
func TestRelayOutageLongerThanTheOldDeliveryLimitLosesNothing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ms := startMailServer(t)
	ms.down.Store(true)
	run := "run-2026-10-13-ldh"
	msgs := []outbox.Message{
		message(run, "debit", run+":debit:SUP-07"),
		message(run, "debit", run+":debit:SUP-11"),
		message(run, "report", run+":report"),
	}
	f.queue(t, msgs...)
	// The backoff cap stands in for the production 5 s: the same number of deliveries, in less time.
	stop := runSender(t, f, outbox.SenderConfig{Transport: outbox.SMTPTransport{Addr: ms.addr}, MaxBackoff: 100 * time.Millisecond})

	const oldLimit = 20
	eventually.That(t, 2*time.Minute, "more deliveries than the old limit allowed", eventually.True(func() bool {
		return ms.dropped.Load() > int64(oldLimit*len(msgs))
	}))
	// Still in the backlog: pending or waiting for a redelivery, none sent.
	if info, err := f.cons.Info(testContext(t)); err != nil || info.NumPending+uint64(info.NumAckPending) != uint64(len(msgs)) {
		t.Fatalf("backlog during the outage: %+v (%v), want %d messages", info, err, len(msgs))
	}
	ms.down.Store(false)
	eventually.That(t, time.Minute, "every message marked sent", eventually.True(func() bool {
		for _, m := range msgs {
			if f.markOf(t, m) != outbox.Sent {
				return false
			}
		}
		return true
	}))
	waitSettled(t, f)
	stop()
	got := map[string]int{}
	for _, r := range ms.mails() {
		got[cairnKey(t, r.Data)]++
	}
	for _, m := range msgs {
		if got[m.Key] != 1 {
			t.Errorf("%s received %d times, want once", m.Key, got[m.Key])
		}
	}
	if len(got) != len(msgs) {
		t.Errorf("received %v, want the %d messages", got, len(msgs))
	}
}

func runSender(t *testing.T, f *fixture, c outbox.SenderConfig) func() {
	t.Helper()
	return run(t, f.sender(t, c))
}

// A webhook that hangs holds up only its own message: the mail of another run goes out
// while the webhook call still hangs.
func TestHangingWebhookDoesNotHoldUpOtherMail(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ms := startMailServer(t)
	var hanging atomic.Int64
	release := make(chan struct{})
	var once sync.Once
	unhang := func() { once.Do(func() { close(release) }) }
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hanging.Add(1)
		defer hanging.Add(-1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(hook.Close)
	t.Cleanup(unhang) // runs before hook.Close

	notice := message("run-a", "handover", "run-a:handover:post-ledger:10:webhook")
	notice.To = []string{hook.URL}
	mail := message("run-b", "report", "run-b:report")
	stop := runSender(t, f, outbox.SenderConfig{
		Transport: outbox.Routed{Mail: outbox.SMTPTransport{Addr: ms.addr}, Webhook: outbox.WebhookTransport{URL: hook.URL, Client: &http.Client{Timeout: 5 * time.Minute}}},
		Timeout:   5 * time.Minute,
		Allow:     outbox.Allow{From: anyMail.From, Mail: anyMail.Mail, Webhook: hook.URL},
	})
	f.queue(t, notice)
	eventually.That(t, time.Minute, "the webhook called", eventually.True(func() bool { return hanging.Load() > 0 }))
	f.queue(t, mail) // behind the hanging notice in the stream

	eventually.That(t, time.Minute, "the other run's mail sent", eventually.True(func() bool { return f.markOf(t, mail) == outbox.Sent }))
	if hanging.Load() == 0 {
		t.Fatal("the webhook call ended before the other mail went: it was held up")
	}
	if got := len(ms.mails()); got != 1 {
		t.Fatalf("relay received %d messages, want 1", got)
	}
	if mark := f.markOf(t, notice); mark != outbox.Sending {
		t.Fatalf("hanging notice marked %q, want sending", mark)
	}
	unhang()
	eventually.That(t, time.Minute, "the notice sent once the webhook answers", eventually.True(func() bool { return f.markOf(t, notice) == outbox.Sent }))
	stop()
}

// Two copies of one message in hand at once (a resume's requeued copy beside the original,
// still being retried) go out once: the second waits for the first copy's turn, instead of
// taking its sending mark for a dead sender's.
func TestTwoCopiesOfAMessageInHandAtOnceGoOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var calls, hanging atomic.Int64
	release := make(chan struct{})
	var once sync.Once
	unhang := func() { once.Do(func() { close(release) }) }
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		hanging.Add(1)
		defer hanging.Add(-1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(hook.Close)
	t.Cleanup(unhang)

	first := message("run-a", "handover", "run-a:handover:post-ledger:10:webhook")
	first.To = []string{hook.URL}
	again := first
	again.Requeue = 7 // the copy a resume queues again: another event id, the same key
	stop := runSender(t, f, outbox.SenderConfig{
		Transport: outbox.Routed{Webhook: outbox.WebhookTransport{URL: hook.URL, Client: &http.Client{Timeout: 5 * time.Minute}}},
		Timeout:   5 * time.Minute,
		Allow:     outbox.Allow{Webhook: hook.URL},
	})
	f.queue(t, first)
	eventually.That(t, time.Minute, "the webhook called", eventually.True(func() bool { return hanging.Load() > 0 }))
	f.queue(t, again)
	// The second copy is delivered to the sender and handed back while the first one hangs.
	eventually.That(t, time.Minute, "the second copy tried", eventually.True(func() bool {
		info, err := f.cons.Info(testContext(t))
		return err == nil && info.Delivered.Consumer >= 3
	}))
	if n := calls.Load(); n != 1 {
		t.Fatalf("the webhook was called %d times while the first copy's call hung, want 1", n)
	}
	unhang()
	eventually.That(t, time.Minute, "the message sent", eventually.True(func() bool { return f.markOf(t, first) == outbox.Sent }))
	eventually.That(t, time.Minute, "both copies settled", eventually.True(func() bool {
		info, err := f.cons.Info(testContext(t))
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	}))
	if n := calls.Load(); n != 1 {
		t.Fatalf("the webhook was called %d times, want 1", n)
	}
	stop()
}

// The notice of a run whose record cannot be trusted (corrupt, another epoch) is exactly
// the one a person needs: it is delivered, while the run's own mail waits.
func TestNoticeOfAnUntrustedRecordIsDelivered(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := testContext(t)
	if _, err := f.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: assets.BucketRuns, History: 16, Metadata: map[string]string{assets.EpochKey: "e7f3c1d2"}}); err != nil {
		t.Fatal(err)
	}
	store, err := kc.Open(ctx, f.js, assets.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.KV().Put(ctx, "run-x", []byte(`{"schema":1,"run_id":"run-x","status":"running","sum":"sha256:00"}`)); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	notice := message("run-x", "handover", "run-x:handover:record:mail")
	notice.Step, notice.Token = "post-ledger", 0
	debit := message("run-x", "debit", "run-x:debit:SUP-07")
	f.queue(t, notice, debit)
	runSender(t, f, outbox.SenderConfig{Transport: outbox.FileTransport{Dir: dir}, Admit: outbox.RecordAdmission(store), MaxBackoff: 100 * time.Millisecond})

	eventually.That(t, time.Minute, "the notice marked sent", eventually.True(func() bool { return f.markOf(t, notice) == outbox.Sent }))
	if got := emlFiles(t, dir); len(got) != 1 || got[0] != filepath.Base(outbox.FileTransport{Dir: dir}.Path(notice)) {
		t.Fatalf("mail files %v, want the notice alone", got)
	}
	if mark := f.markOf(t, debit); mark != "" {
		t.Fatalf("debit note of the untrusted run marked %q, want no mark (it waits)", mark)
	}
}

// A crash after the delivery and before the sent mark (here an injected error at
// outbox-sender.after-deliver.1) is healed by the next turn: the file is found, marked
// sent, not written twice.
func TestFaultAfterDeliverIsHealedByTheNextTurn(t *testing.T) {
	t.Parallel()
	f := setup(t)
	dir := t.TempDir()
	fs, err := faults.Parse(outbox.FaultStep+"."+faults.AfterDeliver+".1=error:temporary@once", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m := message("run-f", "debit", "run-f:debit:SUP-07")
	f.queue(t, m)
	s := f.sender(t, outbox.SenderConfig{Transport: outbox.FileTransport{Dir: dir}, Faults: fs})
	if err := s.Handle(testContext(t), next(t, f.cons)); err == nil {
		t.Fatal("Handle = nil, want the injected fault")
	}
	if mark := f.markOf(t, m); mark != outbox.Sending {
		t.Fatalf("mark after the fault = %q, want sending", mark)
	}
	handleAll(t, s, f.cons, 1)
	if mark := f.markOf(t, m); mark != outbox.Sent {
		t.Fatalf("mark = %q, want sent", mark)
	}
	if got := emlFiles(t, dir); len(got) != 1 {
		t.Fatalf("mail files %v, want one", got)
	}
}

// RecordAdmission drops what the run's record says may no longer go, and admits the rest.
func TestRecordAdmission(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := testContext(t)
	if _, err := f.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: assets.BucketRuns, History: 16, Metadata: map[string]string{assets.EpochKey: "e7f3c1d2"}}); err != nil {
		t.Fatal(err)
	}
	store, err := kc.Open(ctx, f.js, assets.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	rec := kc.New("run-a", kc.StringParams(false, "warehouse", "ldh", "date", "2026-10-13"), []string{"debit-notes"}, "2026-10-13T22:00:00Z")
	rec.Generation = 1
	committed := uint64(1876)
	rec.Step("debit-notes").Token = &committed
	if _, err := store.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	admit := outbox.RecordAdmission(store)
	m := message("run-a", "debit", "run-a:debit:SUP-07:g1")
	m.Generation = 1
	tests := []struct {
		name   string
		change func(m *outbox.Message)
		want   bool
	}{
		{"the committed attempt's", func(*outbox.Message) {}, true},
		{"an older generation's", func(m *outbox.Message) { m.Generation = 0 }, false},
		{"an attempt that lost its lease", func(m *outbox.Message) { m.Token = committed - 1 }, false},
		{"a run with no record", func(m *outbox.Message) { m.RunID = "run-gone" }, false},
	}
	for _, tt := range tests {
		mm := m
		tt.change(&mm)
		ok, reason, err := admit(ctx, mm)
		if err != nil || ok != tt.want || (!ok && reason == "") {
			t.Errorf("%s: admit = %v, %q, %v; want %v", tt.name, ok, reason, err, tt.want)
		}
	}
}
