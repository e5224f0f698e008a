package outbox_test

import (
	"bytes"
	"context"
	"net/mail"
	"os"
	"path/filepath"
	"testing"

	"github.com/cairnhq/cairn/pkg/outbox"
)

// harness is one transport together with a view of what reached the outside.
type harness struct {
	transport outbox.Transport
	// received returns every message the outside system holds, by X-Cairn-Key.
	received func(t *testing.T) map[string][][]byte
	// tells is whether Delivered can see a delivery afterwards.
	tells bool
}

// testTransportContract is the behaviour every Transport shares, alone and under
// the Sender.
func testTransportContract(t *testing.T, newHarness func(t *testing.T) harness) {
	t.Run("Deliver hands over the rendered bytes", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		m := message("run-k", "debit", "run-k:debit:SUP-07")
		if went, err := h.transport.Delivered(testContext(t), m); err != nil || went {
			t.Fatalf("Delivered before Deliver = %v, %v; want false", went, err)
		}
		if err := h.transport.Deliver(testContext(t), m, outbox.Render(m)); err != nil {
			t.Fatalf("Deliver: %v", err)
		}
		got := h.received(t)
		if len(got) != 1 || len(got[m.Key]) != 1 || !bytes.Equal(got[m.Key][0], outbox.Render(m)) {
			t.Fatalf("outside holds %q, want exactly the rendered %q", got, m.Key)
		}
		if went, err := h.transport.Delivered(testContext(t), m); err != nil || went != h.tells {
			t.Errorf("Delivered after Deliver = %v, %v; want %v", went, err, h.tells)
		}
	})

	t.Run("Deliver with a cancelled context hands over nothing", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		m := message("run-k", "report", "run-k:report")
		ctx, cancel := context.WithCancel(testContext(t))
		cancel()
		if err := h.transport.Deliver(ctx, m, outbox.Render(m)); err == nil {
			t.Fatal("Deliver with a cancelled context succeeded")
		}
		if got := h.received(t); len(got) != 0 {
			t.Errorf("outside holds %q, want nothing", got)
		}
	})

	t.Run("Sender delivers each key once across redeliveries", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		f := setup(t)
		msgs := []outbox.Message{
			message("run-k", "debit", "run-k:debit:SUP-07"),
			message("run-k", "debit", "run-k:debit:SUP-11"),
			message("run-k", "report", "run-k:report"),
		}
		f.queue(t, msgs...)
		handleAll(t, f.sender(t, outbox.SenderConfig{Transport: h.transport}), f.cons, len(msgs))
		// The same stream messages once more, as another sender would see them.
		handleAll(t, f.sender(t, outbox.SenderConfig{Transport: h.transport}), f.consumer(t, "outbox-sender-2"), len(msgs))

		got := h.received(t)
		if len(got) != len(msgs) {
			t.Errorf("outside holds %d keys, want %d", len(got), len(msgs))
		}
		for _, m := range msgs {
			if len(got[m.Key]) != 1 || !bytes.Equal(got[m.Key][0], outbox.Render(m)) {
				t.Errorf("%s reached the outside %d times, want once, as rendered", m.Key, len(got[m.Key]))
			}
			if mark := f.markOf(t, m); mark != outbox.Sent {
				t.Errorf("%s mark = %q, want sent", m.Key, mark)
			}
		}
	})

	t.Run("a sending mark with nothing delivered is delivered once", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		f := setup(t)
		m := message("run-k", "debit", "run-k:debit:SUP-07")
		f.queue(t, m)
		if _, err := f.kv.Create(testContext(t), outbox.MarkKey(m.RunID, m.Key), []byte(outbox.Sending)); err != nil {
			t.Fatal(err)
		}
		handleAll(t, f.sender(t, outbox.SenderConfig{Transport: h.transport}), f.cons, 1)

		if got := h.received(t); len(got[m.Key]) != 1 {
			t.Errorf("%s reached the outside %d times, want once", m.Key, len(got[m.Key]))
		}
		if mark := f.markOf(t, m); mark != outbox.Sent {
			t.Errorf("mark = %q, want sent", mark)
		}
	})

	t.Run("a cancelled message is never delivered", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		f := setup(t)
		m := message("run-k", "debit", "run-k:debit:SUP-07")
		f.queue(t, m)
		if won, err := outbox.Cancel(testContext(t), f.kv, m.RunID, m.Key); err != nil || !won {
			t.Fatalf("Cancel = %v, %v", won, err)
		}
		handleAll(t, f.sender(t, outbox.SenderConfig{Transport: h.transport}), f.cons, 1)
		if got := h.received(t); len(got) != 0 {
			t.Errorf("outside holds %q, want nothing", got)
		}
	})
}

func TestFileTransportContract(t *testing.T) {
	t.Parallel()
	testTransportContract(t, func(t *testing.T) harness {
		dir := t.TempDir()
		return harness{
			transport: outbox.FileTransport{Dir: dir},
			tells:     true,
			received: func(t *testing.T) map[string][][]byte {
				t.Helper()
				got := map[string][][]byte{}
				for _, name := range emlFiles(t, dir) {
					raw, err := os.ReadFile(filepath.Join(dir, name))
					if err != nil {
						t.Fatal(err)
					}
					key := cairnKey(t, raw)
					if name != sha(key)+".eml" {
						t.Errorf("file %s holds key %q", name, key)
					}
					got[key] = append(got[key], raw)
				}
				return got
			},
		}
	})
}

func TestSMTPTransportContract(t *testing.T) {
	t.Parallel()
	testTransportContract(t, func(t *testing.T) harness {
		ms := startMailServer(t)
		return harness{
			transport: outbox.SMTPTransport{Addr: ms.addr},
			tells:     false,
			received: func(t *testing.T) map[string][][]byte {
				t.Helper()
				got := map[string][][]byte{}
				for _, r := range ms.mails() {
					key := cairnKey(t, r.Data)
					got[key] = append(got[key], r.Data)
				}
				return got
			},
		}
	})
}

func cairnKey(t *testing.T, raw []byte) string {
	t.Helper()
	parsed, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("parsing delivered message: %v", err)
	}
	return parsed.Header.Get("X-Cairn-Key")
}
