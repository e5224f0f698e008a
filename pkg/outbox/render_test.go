package outbox_test

import (
	"bytes"
	"flag"
	"net/mail"
	"os"
	"path/filepath"
	"testing"

	"github.com/cairnhq/cairn/pkg/outbox"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func TestRenderMatchesGolden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		m    outbox.Message
	}{
		{"debit", message("run-2026-10-13-ldh", "debit", "run-2026-10-13-ldh:debit:SUP-07")},
		{"shadow-unicode", func() outbox.Message {
			m := message("run-2026-10-13-ldh", "report", "run-2026-10-13-ldh:report")
			m.Shadow = true
			m.From = "Kirti Añand <finance@example.com>"
			m.To = []string{"head@example.com", "Audit <audit@example.com>"}
			m.Subject = "Rapport — ₹27,150.00"
			m.Body = "line one\r\nline two\rline three"
			return m
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := outbox.Render(tt.m)
			if again := outbox.Render(tt.m); !bytes.Equal(got, again) {
				t.Fatal("Render gave different bytes for the same message")
			}
			golden := filepath.Join("testdata", tt.name+".eml.golden")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("reading golden file (run with -update to create it): %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("Render =\n%q\nwant\n%q", got, want)
			}
			if bytes.Contains(bytes.ReplaceAll(got, []byte("\r\n"), nil), []byte("\n")) ||
				bytes.Contains(bytes.ReplaceAll(got, []byte("\r\n"), nil), []byte("\r")) {
				t.Error("Render has a line ending other than CRLF")
			}
		})
	}
}

func TestRenderHeaders(t *testing.T) {
	t.Parallel()
	m := message("run-7", "debit", "run-7:debit:SUP-07")
	parsed, err := mail.ReadMessage(bytes.NewReader(outbox.Render(m)))
	if err != nil {
		t.Fatalf("parsing rendered message: %v", err)
	}
	want := map[string]string{
		"Message-Id":   "<run-7.debit.SUP-07@cairn.local>",
		"X-Cairn-Key":  "run-7:debit:SUP-07",
		"Date":         "Tue, 13 Oct 2026 22:30:00 +0530",
		"Mime-Version": "1.0",
		"Content-Type": "text/plain; charset=utf-8",
		"To":           "accounts@supplier.example",
		"From":         `"Cairn" <cairn@example.com>`,
		"Subject":      "Debit note run-7:debit:SUP-07",
	}
	for name, value := range want {
		if got := parsed.Header.Get(name); got != value {
			t.Errorf("header %s = %q, want %q", name, got, value)
		}
	}
	if got := outbox.MessageID(m.Key); got != want["Message-Id"] {
		t.Errorf("MessageID = %q, want %q", got, want["Message-Id"])
	}
}

func TestMarkKey(t *testing.T) {
	t.Parallel()
	got := outbox.MarkKey("run-7", "run-7:report")
	if want := "run-7." + sha("run-7:report"); got != want {
		t.Fatalf("MarkKey = %q, want %q", got, want)
	}
	if outbox.MarkKey("run-7", "run-7:debit:SUP-07") == got {
		t.Error("two keys share a mark")
	}
}
