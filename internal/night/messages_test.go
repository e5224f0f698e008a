package night

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/outbox"
	"github.com/cairnhq/cairn/pkg/saga"
)

// TestMailSagaRecordsStaySmall: whatever the size of a note, its saga intent (a digest of
// the body, and the withdrawal that reverses it, quoting the note's head) stays far below
// the size of an event.
func TestMailSagaRecordsStaySmall(t *testing.T) {
	var body strings.Builder
	for i := range 20_000 {
		fmt.Fprintf(&body, "INV-20261013-%06d  %d  price  BOLT-M8-50  %14s\n", i, 1+i%5, "1,250.00")
	}
	m := outbox.Message{Key: "run-1:debit:SUP-01", RunID: "run-1", Kind: "debit", Step: DebitNotes, From: "a@example.com",
		To: []string{"b@example.com"}, Subject: "Debit note SUP-01", Body: body.String(), QueuedAt: time.Unix(0, 0)}
	w := m
	w.Key, w.Kind, w.Reverses = m.Key+":withdraw", "withdraw", m.Key
	w.Body = "This withdraws our claim.\n\n" + quote(m.Body, m.Key)
	r := saga.Record{Key: m.Key, RunID: m.RunID, Step: DebitNotes, Phase: saga.Intent, Attrs: map[string]string{AttrSupplier: "SUP-01"},
		Reverse: reverseWith(saga.Mail, w, w.Key)}
	r.Payload, _ = json.Marshal(intentOf(m))
	e, err := events.New(m.Key+":intent", events.TypeSaga, "/cairn/debit-notes", m.RunID, time.Unix(0, 0), r)
	if err != nil {
		t.Fatalf("the intent of a %d-byte note: %v", len(m.Body), err)
	}
	if len(e.Data) > 8<<10 {
		t.Errorf("the intent of a %d-byte note is %d bytes", len(m.Body), len(e.Data))
	}
	q := quote(m.Body, m.Key)
	if !strings.HasPrefix(m.Body, q[:strings.LastIndexByte(q[:len(q)-1], '\n')+1]) || !strings.Contains(q, "more lines: see message "+m.Key) {
		t.Errorf("quote of a long body:\n%s", q)
	}
	if short := "Debit note\n\nTotal: 1\n"; quote(short, m.Key) != short {
		t.Errorf("quote of a short body = %q, want it whole", quote(short, m.Key))
	}
}
