package supervisor

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/cairnhq/cairn/pkg/runner"
)

// noticesSent records the notes a supervisor notifies of.
type noticesSent struct {
	mu    sync.Mutex
	notes []runner.HandoverNote
}

func (n *noticesSent) notify(_ context.Context, _ string, note runner.HandoverNote, _ int, _ uint64) {
	n.mu.Lock()
	n.notes = append(n.notes, note)
	n.mu.Unlock()
}

func (n *noticesSent) all() []runner.HandoverNote {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]runner.HandoverNote(nil), n.notes...)
}

// 300 junk entries written into the runs bucket by a service's user gave 300 handover notes
// and 300 mails. Now each run still has its note (what a person must look at), but the
// notices are bounded per source (the runs bucket) and window: NoticeBurst alone, then one
// summary naming how many more; what comes after the summary is told, counted, by the next
// window's.
func TestUntrustedFloodGivesBoundedNotices(t *testing.T) {
	f := setup(t)
	var sent noticesSent
	s, err := New(Config{
		JS: f.js, Store: f.store, Marks: f.marks, Handovers: f.notes, NaturalKeys: f.natural, Pipeline: abc,
		Lease: testLease, StallTimeout: testStall, TakeoverGap: testLease / 10, Now: f.clock.Now, Notify: sent.notify,
	})
	if err != nil {
		t.Fatal(err)
	}
	junk := func(from, to int) {
		for i := from; i < to; i++ {
			if _, err := f.store.KV().Put(f.ctx, fmt.Sprintf("run-junk-%03d", i), []byte("junk")); err != nil {
				t.Fatal(err)
			}
		}
	}
	junk(0, 300)
	f.observeAll(t, s)
	s.SweepOnce(f.ctx, true)

	for i := range 300 { // every run has its own note
		if _, err := f.notes.Get(f.ctx, fmt.Sprintf("run-junk-%03d", i)); err != nil {
			t.Fatalf("run-junk-%03d: no handover note: %v", i, err)
		}
	}
	notes := sent.all()
	if len(notes) != s.cfg.NoticeBurst+1 {
		t.Fatalf("%d notices for 300 untrusted records, want %d alone and one summary", len(notes), s.cfg.NoticeBurst)
	}
	summary := notes[len(notes)-1]
	if !strings.Contains(summary.Error, "297 more records of cairn-runs failed their checks") || !strings.Contains(summary.NextAction, "cairn-handovers") {
		t.Errorf("summary %+v, want it to name the 297 and where their notes are", summary)
	}
	for _, n := range notes[:len(notes)-1] {
		if !strings.HasSuffix(n.ID, ":handover:record") {
			t.Errorf("notice %q, want a record's own note", n.ID)
		}
	}

	// More in the same window: counted, not told yet (the window's summary was sent).
	junk(300, 350)
	f.observeAll(t, s)
	s.SweepOnce(f.ctx, false)
	if n := len(sent.all()); n != len(notes) {
		t.Fatalf("%d notices after 50 more in the window, want still %d", n, len(notes))
	}
	// The next window tells them: one summary naming the 50.
	f.clock.Advance(s.cfg.NoticeWindow)
	s.SweepOnce(f.ctx, false)
	after := sent.all()
	if len(after) != len(notes)+1 || !strings.Contains(after[len(after)-1].Error, "50 more records") {
		t.Fatalf("notices after the window: %d, last %+v; want one more naming the 50", len(after), after[len(after)-1])
	}
	if _, err := f.notes.Get(f.ctx, "run-junk-349"); err != nil {
		t.Fatalf("run-junk-349: no handover note: %v", err)
	}
}
