package mailbox

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cairnhq/cairn/pkg/idempotency"
)

// crlf writes a message as a mail server keeps it.
func crlf(s string) []byte { return []byte(strings.ReplaceAll(s, "\n", "\r\n")) }

func TestAttachmentsOfHandWrittenMail(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		raw  string
		want []part
	}{
		{"a Latin-1 text file keeps its bytes", `Content-Type: multipart/mixed; boundary=b

--b
Content-Type: text/plain

see attached
--b
Content-Type: text/csv; charset=iso-8859-1
Content-Disposition: attachment; filename=lines.csv
Content-Transfer-Encoding: quoted-printable

M=DC-7;3
--b--
`, []part{{"lines.csv", []byte("M\xdc-7;3")}}},
		{"inline with a file name, and a name in Content-Type only", `Content-Type: multipart/related; boundary=b

--b
Content-Type: image/png
Content-Disposition: inline; filename=logo.png
Content-Transfer-Encoding: base64

iVBO
Rw==
--b
Content-Type: application/pdf; name="old mailer.pdf"

%PDF
--b--
`, []part{{"logo.png", []byte("\x89PNG")}, {"old mailer.pdf", []byte("%PDF")}}},
		{"encoded names: RFC 2047 and RFC 2231", `Content-Type: multipart/mixed; boundary=b

--b
Content-Disposition: attachment; filename="=?UTF-8?Q?Rechnung_M=C3=BCller.pdf?="

a
--b
Content-Disposition: attachment; filename*=UTF-8''Facture%20%C3%A9t%C3%A9.pdf

b
--b--
`, []part{{"Rechnung Müller.pdf", []byte("a")}, {"Facture été.pdf", []byte("b")}}},
		{"nested parts, a nameless attachment named by its part", `Content-Type: multipart/mixed; boundary=outer

--outer
Content-Type: multipart/alternative; boundary=inner

--inner
Content-Type: text/plain

hello
--inner
Content-Type: text/html

<p>hello</p>
--inner--
--outer
Content-Disposition: attachment

x
--outer--
`, []part{{"part-2", []byte("x")}}},
		{"a whole message that is the file", `Content-Type: application/pdf
Content-Disposition: attachment; filename=scan.pdf
Content-Transfer-Encoding: base64

JVBERg==
`, []part{{"scan.pdf", []byte("%PDF")}}},
		{"text only", "Subject: hello\n\nno files\n", nil},
	} {
		got, err := attachments(crlf(tc.raw))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		eq := func(a, b part) bool { return a.name == b.name && string(a.data) == string(b.data) }
		if !slices.EqualFunc(got, tc.want, eq) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestBrokenMailIsAnError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, raw, says string }{
		{"no boundary", "Content-Type: multipart/mixed\n\nx\n", "without a boundary"},
		{"no last boundary", "Content-Type: multipart/mixed; boundary=b\n\n--b\nContent-Disposition: attachment\n\nx\n", "part 1"},
		{"nested too deep", deep(maxDepth + 2), "nested deeper than 16"},
	} {
		if got, err := attachments(crlf(tc.raw)); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %q, %v; want an error saying %q", tc.name, got, err, tc.says)
		}
	}
}

// deep is a message of n multiparts, each inside the one before.
func deep(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "Content-Type: multipart/mixed; boundary=b%d\n\n--b%d\n", i, i)
	}
	return b.String() + "\nx\n"
}

func FuzzAttachments(f *testing.F) {
	f.Add(crlf("Content-Type: multipart/mixed; boundary=b\n\n--b\nContent-Disposition: attachment; filename=a\nContent-Transfer-Encoding: base64\n\nYQ==\n--b--\n"))
	f.Add(crlf("Subject: x\n\ny\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		a, errA := attachments(raw) // never a panic
		b, errB := attachments(raw)
		if (errA == nil) != (errB == nil) || len(a) != len(b) {
			t.Fatalf("two reads differ: %v %v", errA, errB)
		}
	})
}

func TestCompareNamesEachChange(t *testing.T) {
	t.Parallel()
	s := Snapshot{Folder: "F"}
	m := Message{UID: 7, Attachments: describe([]part{{"a.pdf", []byte("a")}, {"b.pdf", []byte("b")}})}
	da, db, dc := idempotency.Digest([]byte("a")), idempotency.Digest([]byte("b")), idempotency.Digest([]byte("c"))
	for _, tc := range []struct {
		name  string
		parts []part
		want  []string
	}{
		{"same", []part{{"a.pdf", []byte("a")}, {"b.pdf", []byte("b")}}, nil},
		{"changed", []part{{"a.pdf", []byte("c")}, {"b.pdf", []byte("b")}},
			[]string{`folder "F": message 7, attachment "a.pdf": ` + da + " is now " + dc}},
		{"renamed", []part{{"a.pdf", []byte("a")}, {"c.pdf", []byte("b")}},
			[]string{`folder "F": message 7, attachment "b.pdf" (` + db + `) is now "c.pdf" (` + db + ")"}},
		{"gone", []part{{"a.pdf", []byte("a")}},
			[]string{`folder "F": message 7, attachment "b.pdf" (` + db + ") is gone"}},
		{"new", []part{{"a.pdf", []byte("a")}, {"b.pdf", []byte("b")}, {"c.pdf", []byte("c")}},
			[]string{`folder "F": message 7, attachment "c.pdf" (` + dc + ") is new"}},
	} {
		if got := s.compare(m, tc.parts); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestFingerprintCoversWhatTheRunRead(t *testing.T) {
	t.Parallel()
	base := Snapshot{Folder: "F", UIDValidity: 3, HighestUID: 9, Messages: []Message{
		{UID: 1, Attachments: []Attachment{{Name: "a.pdf", Size: 1, Digest: idempotency.Digest([]byte("a"))}}},
	}}
	fp := base.Fingerprint()
	edits := map[string]func(*Snapshot){
		"folder":   func(s *Snapshot) { s.Folder = "G" },
		"validity": func(s *Snapshot) { s.UIDValidity = 4 },
		"uid":      func(s *Snapshot) { s.Messages[0].UID = 2 },
		"name":     func(s *Snapshot) { s.Messages[0].Attachments[0].Name = "b.pdf" },
		"digest":   func(s *Snapshot) { s.Messages[0].Attachments[0].Digest = idempotency.Digest([]byte("b")) },
	}
	for what, edit := range edits {
		s := base
		s.Messages = []Message{{UID: 1, Attachments: slices.Clone(base.Messages[0].Attachments)}}
		edit(&s)
		if s.Fingerprint() == fp {
			t.Errorf("another %s, the same fingerprint", what)
		}
	}
	later := base
	later.HighestUID = 12 // mail after the freeze is not what the run read
	if later.Fingerprint() != fp {
		t.Error("the highest UID changed the fingerprint")
	}
}
