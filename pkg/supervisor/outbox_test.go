package supervisor

import (
	"strings"
	"testing"
	"time"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/audit"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/outbox"
)

const testOutboxStall = 15 * time.Minute

// A finishing run whose mail cannot go (the relay is down: its sender keeps a sending mark
// and retries) is handed over CAIRN_OUTBOX_STALL after its last progress, naming exactly the
// undelivered messages; once they go, a resume makes it done.
func TestSweepHandsOverAFinishingRunWhoseMailIsStalled(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.create(t, "r1", finishing(0))
	debit := f.queue(t, "r1", "debit", 0)
	report := f.queue(t, "r1", "report", 0)
	f.mark(t, "r1", debit, outbox.Sent)
	f.mark(t, "r1", report, outbox.Sending)
	f.observeAll(t, s)

	// The old stall timeout is not what stops a finishing run.
	f.clock.Advance(testOutboxStall - time.Second)
	s.SweepOnce(f.ctx, false)
	if rec, _ := f.load(t, "r1"); rec.Status != kc.Finishing {
		t.Fatalf("status %s before CAIRN_OUTBOX_STALL, want finishing", rec.Status)
	}
	f.clock.Advance(2 * time.Second)
	s.SweepOnce(f.ctx, false)
	f.handedOver(t, "r1", "", "CAIRN_OUTBOX_STALL")
	if n := noteError(t, f, "r1"); !strings.Contains(n, "undelivered") || !strings.Contains(n, strings.TrimPrefix(report, "r1:")) || strings.Contains(n, strings.TrimPrefix(debit, "r1:")) {
		t.Fatalf("note %q: want it to name %s and not %s", noteError(t, f, "r1"), report, debit)
	}
	if got := counter(t, s.cfg.Metrics.Handovers.WithLabelValues("run", reasonOutboxStall)); got != 1 {
		t.Fatalf("cairn_handovers_total{reason=outbox_stall} = %v", got)
	}

	// The relay is back: the retried copy goes; the resume leaves the sending message to it.
	f.mark(t, "r1", report, outbox.Sent)
	f.command(t, s, events.RunSubject("r1", events.VerbResume), `{"request_id":"resume-1"}`)
	if copies := f.copies(t, "r1", report); copies != 1 {
		t.Fatalf("%d copies of %s on the outbox, want the one (a sending message is not queued again)", copies, report)
	}
	f.observeAll(t, s)
	s.SweepOnce(f.ctx, false)
	if rec, _ := f.load(t, "r1"); rec.Status != kc.Done {
		t.Fatalf("status %s after the resume, want done", rec.Status)
	}
}

// A message refused for good (an SMTP 5xx) hands its finishing run over at once, naming the
// message and the error; the resume after the fix reopens its mark and queues it once more.
func TestRefusedMessageHandsOverAtOnceAndResumeRequeuesIt(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.create(t, "r1", finishing(0))
	debit := f.queue(t, "r1", "debit", 0)
	report := f.queue(t, "r1", "report", 0)
	f.mark(t, "r1", report, outbox.Sent)
	f.mark(t, "r1", debit, outbox.Refused)
	if err := audit.New(f.js, "outbox-sender", f.clock.Now).Record(f.ctx, events.AuditItemID("r1", "c", EventOutboxRefused, 7, debit, 0),
		events.Audit{RunID: "r1", Step: "c", Event: EventOutboxRefused, Token: 7, Item: debit, Detail: "SMTP error 550: no such mailbox"}); err != nil {
		t.Fatal(err)
	}
	f.observeAll(t, s)

	s.SweepOnce(f.ctx, false)
	f.handedOver(t, "r1", "", debit)
	if n := noteError(t, f, "r1"); !strings.Contains(n, "550: no such mailbox") || strings.Contains(n, report) {
		t.Fatalf("note %q: want the refused message and its error alone", n)
	}

	f.command(t, s, events.RunSubject("r1", events.VerbResume), `{"request_id":"resume-1"}`)
	rec, _ := f.load(t, "r1")
	if rec.Status != kc.Finishing {
		t.Fatalf("status %s after the resume, want finishing", rec.Status)
	}
	if mark := f.markOf(t, "r1", debit); mark != "" {
		t.Fatalf("mark of %s after the resume = %q, want reopened (none)", debit, mark)
	}
	if copies := f.copies(t, "r1", debit); copies != 2 {
		t.Fatalf("%d copies of %s on the outbox, want 2 (the original and the resume's)", copies, debit)
	}
	if copies := f.copies(t, "r1", report); copies != 1 {
		t.Fatalf("%d copies of the sent %s, want 1", copies, report)
	}
	// The sweep does not hand the resumed run over again while its mail is on its way.
	f.observeAll(t, s)
	s.SweepOnce(f.ctx, false)
	if rec, _ := f.load(t, "r1"); rec.Status != kc.Finishing {
		t.Fatalf("status %s while the requeued message is on its way, want finishing", rec.Status)
	}
	// A replay of the resume queues nothing more.
	f.command(t, s, events.RunSubject("r1", events.VerbResume), `{"request_id":"resume-1"}`)
	if copies := f.copies(t, "r1", debit); copies != 2 {
		t.Fatalf("%d copies of %s after a replayed resume, want 2", copies, debit)
	}
	f.mark(t, "r1", debit, outbox.Sent)
	s.SweepOnce(f.ctx, false)
	if rec, _ := f.load(t, "r1"); rec.Status != kc.Done {
		t.Fatalf("status %s once the message went, want done", rec.Status)
	}
}

func noteError(t *testing.T, f *fixture, runID string) string {
	t.Helper()
	rec, _ := f.load(t, runID)
	if rec.Handover == nil {
		return ""
	}
	e, err := f.notes.Get(f.ctx, runID)
	if err != nil {
		t.Fatalf("handover note: %v", err)
	}
	return string(e.Value())
}

func (f *fixture) markOf(t *testing.T, runID, key string) outbox.Mark {
	t.Helper()
	mark, err := outbox.MarkOf(f.ctx, f.marks, runID, key)
	if err != nil {
		t.Fatalf("mark of %s: %v", key, err)
	}
	return mark
}

// copies counts the copies of a message key queued for the run.
func (f *fixture) copies(t *testing.T, runID, key string) int {
	t.Helper()
	msgs, err := Queued(f.ctx, f.js, assets.Default, nil, runID)
	if err != nil {
		t.Fatalf("listing the outbox: %v", err)
	}
	n := 0
	for _, m := range msgs {
		if m.Key == key {
			n++
		}
	}
	return n
}

// Mail going out is progress: a finishing run whose messages go one at a time, each within
// CAIRN_OUTBOX_STALL of the one before, is not handed over, however long all of them take;
// once none has gone for CAIRN_OUTBOX_STALL, it is.
func TestOutboxStallCountsFromTheLastMessageDelivered(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.create(t, "r1", finishing(0))
	var keys []string
	for _, k := range []string{"debit-a", "debit-b", "report"} {
		key := f.queue(t, "r1", k, 0)
		f.mark(t, "r1", key, outbox.Sending)
		keys = append(keys, key)
	}
	f.observeAll(t, s)
	s.SweepOnce(f.ctx, false)
	for _, key := range keys[:2] {
		f.clock.Advance(testOutboxStall - time.Second)
		f.mark(t, "r1", key, outbox.Sent)
		s.SweepOnce(f.ctx, false)
		f.status(t, "r1", kc.Finishing, "a message went within the stall")
	}
	f.clock.Advance(testOutboxStall - time.Second)
	s.SweepOnce(f.ctx, false)
	f.status(t, "r1", kc.Finishing, "a second before CAIRN_OUTBOX_STALL since the last message went")
	f.clock.Advance(time.Second)
	s.SweepOnce(f.ctx, false)
	f.handedOver(t, "r1", "", "CAIRN_OUTBOX_STALL")
	if n := noteError(t, f, "r1"); !strings.Contains(n, "1 outbox messages") || !strings.Contains(n, "report") {
		t.Fatalf("note %q: want it to name the one undelivered report", n)
	}
}
