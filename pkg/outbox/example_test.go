package outbox_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/cairnhq/cairn/pkg/outbox"
)

func ExampleRender() {
	m := outbox.Message{
		Key:      "run-2026-10-13-ldh:debit:SUP-07",
		RunID:    "run-2026-10-13-ldh",
		Kind:     "debit",
		Step:     "debit-notes",
		From:     "cairn@example.com",
		To:       []string{"accounts@supplier.example"},
		Subject:  "Debit note",
		Body:     "Total: 482.50\n",
		QueuedAt: time.Date(2026, 10, 13, 22, 30, 0, 0, time.UTC),
	}
	fmt.Print(strings.ReplaceAll(string(outbox.Render(m)), "\r\n", "\n"))
	fmt.Println(outbox.MarkKey(m.RunID, m.Key)[:len(m.RunID)+9] + "...")
	// Output:
	// From: cairn@example.com
	// To: accounts@supplier.example
	// Subject: Debit note
	// Date: Tue, 13 Oct 2026 22:30:00 +0000
	// Message-ID: <run-2026-10-13-ldh.debit.SUP-07@cairn.local>
	// X-Cairn-Key: run-2026-10-13-ldh:debit:SUP-07
	// MIME-Version: 1.0
	// Content-Type: text/plain; charset=utf-8
	// Content-Transfer-Encoding: 8bit
	//
	// Total: 482.50
	// run-2026-10-13-ldh.607ec807...
}
