package outbox_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/mail"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cairnhq/cairn/pkg/outbox"
)

func sha(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// emlFiles lists the .eml files of dir by name.
func emlFiles(t *testing.T, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.eml"))
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		names[i] = filepath.Base(n)
	}
	slices.Sort(names)
	return names
}

func TestFileSenderWritesOneFilePerKey(t *testing.T) {
	t.Parallel()
	f := setup(t)
	dir := t.TempDir()
	run := "run-2026-10-13-ldh"
	msgs := []outbox.Message{
		message(run, "debit", run+":debit:SUP-07"),
		message(run, "debit", run+":debit:SUP-11"),
		message(run, "report", run+":report"),
	}
	f.queue(t, msgs...)
	var marked []string
	s := f.sender(t, outbox.SenderConfig{
		Transport: outbox.FileTransport{Dir: dir},
		Marked:    func(_ context.Context, runID string) { marked = append(marked, runID) },
	})

	handleAll(t, s, f.cons, len(msgs))

	var want []string
	for _, m := range msgs {
		want = append(want, sha(m.Key)+".eml")
	}
	slices.Sort(want)
	if got := emlFiles(t, dir); !slices.Equal(got, want) {
		t.Fatalf("mail folder holds %v, want %v", got, want)
	}
	before := map[string]os.FileInfo{}
	for _, m := range msgs {
		path := filepath.Join(dir, sha(m.Key)+".eml")
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		parsed, err := mail.ReadMessage(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("parsing %s: %v", path, err)
		}
		if got := parsed.Header.Get("Message-Id"); got != outbox.MessageID(m.Key) {
			t.Errorf("%s Message-ID = %q, want %q", m.Key, got, outbox.MessageID(m.Key))
		}
		if got := parsed.Header.Get("X-Cairn-Key"); got != m.Key {
			t.Errorf("%s X-Cairn-Key = %q, want %q", m.Key, got, m.Key)
		}
		if !bytes.Equal(raw, outbox.Render(m)) {
			t.Errorf("%s file differs from Render", m.Key)
		}
		if mark := f.markOf(t, m); mark != outbox.Sent {
			t.Errorf("%s mark = %q, want sent", m.Key, mark)
		}
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		before[m.Key] = info
	}
	// sending, then sent, for each message
	if len(marked) != 2*len(msgs) {
		t.Errorf("Marked called %d times, want %d", len(marked), 2*len(msgs))
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, ".*.tmp")); len(tmp) != 0 {
		t.Errorf("temporary files left behind: %v", tmp)
	}

	// The same stream messages again, through a second consumer and a second sender.
	again := f.sender(t, outbox.SenderConfig{Transport: outbox.FileTransport{Dir: dir}})
	handleAll(t, again, f.consumer(t, "outbox-sender-2"), len(msgs))

	if got := emlFiles(t, dir); !slices.Equal(got, want) {
		t.Fatalf("after redelivery the mail folder holds %v, want %v", got, want)
	}
	for _, m := range msgs {
		path := filepath.Join(dir, sha(m.Key)+".eml")
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if !os.SameFile(info, before[m.Key]) || !info.ModTime().Equal(before[m.Key].ModTime()) {
			t.Errorf("%s was rewritten on redelivery", m.Key)
		}
	}
}

func TestFileSenderShadowGoesToShadowFolder(t *testing.T) {
	t.Parallel()
	f := setup(t)
	dir := t.TempDir()
	m := message("run-s", "report", "run-s:report")
	m.Shadow = true
	f.queue(t, m)
	handleAll(t, f.sender(t, outbox.SenderConfig{Transport: outbox.FileTransport{Dir: dir}}), f.cons, 1)

	if got := emlFiles(t, dir); len(got) != 0 {
		t.Errorf("shadow message landed in the mail folder: %v", got)
	}
	if got := emlFiles(t, filepath.Join(dir, "shadow")); !slices.Equal(got, []string{sha(m.Key) + ".eml"}) {
		t.Errorf("shadow folder holds %v, want the message's file", got)
	}
}

func TestFileSenderFollowsLeftoverSendingMark(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		withFile bool
	}{
		{"file present: marked sent, not rewritten", true},
		{"file missing: written", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			dir := t.TempDir()
			transport := outbox.FileTransport{Dir: dir}
			m := message("run-9", "debit", "run-9:debit:SUP-03")
			f.queue(t, m)
			// A sender died after claiming the mark (and, in one case, after writing the file).
			if _, err := f.kv.Create(testContext(t), outbox.MarkKey(m.RunID, m.Key), []byte(outbox.Sending)); err != nil {
				t.Fatal(err)
			}
			// A leftover temporary file of the dead sender, half written.
			tmp := filepath.Join(dir, "."+sha(m.Key)+".tmp")
			if err := os.WriteFile(tmp, []byte("From: half"), 0o600); err != nil {
				t.Fatal(err)
			}
			var before os.FileInfo
			if tt.withFile {
				if err := transport.Deliver(testContext(t), m, outbox.Render(m)); err != nil {
					t.Fatal(err)
				}
				var err error
				if before, err = os.Stat(transport.Path(m)); err != nil {
					t.Fatal(err)
				}
			}

			handleAll(t, f.sender(t, outbox.SenderConfig{Transport: transport}), f.cons, 1)

			if mark := f.markOf(t, m); mark != outbox.Sent {
				t.Errorf("mark = %q, want sent", mark)
			}
			after, err := os.Stat(transport.Path(m))
			if err != nil {
				t.Fatalf("message file: %v", err)
			}
			if tt.withFile && (!os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime())) {
				t.Error("the file was rewritten")
			}
			raw, err := os.ReadFile(transport.Path(m))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(raw, outbox.Render(m)) {
				t.Errorf("file = %q, want the rendered message", raw)
			}
		})
	}
}
