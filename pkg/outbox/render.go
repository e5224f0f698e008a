package outbox

import (
	"bytes"
	"mime"
	"net/mail"
	"strings"
	"time"
)

// Render builds the RFC 5322 message for m: From, To, Subject, Date (QueuedAt,
// RFC 1123Z), Message-ID (<key with ':' turned into '.'@cairn.local>), X-Cairn-Key,
// MIME-Version and a UTF-8 text/plain body, all with CRLF line endings. It reads
// no clock and no environment, so the same Message always renders the same bytes:
// a repeated delivery is byte for byte the first one.
func Render(m Message) []byte {
	var b bytes.Buffer
	header := func(name, value string) {
		b.WriteString(name)
		b.WriteString(": ")
		b.WriteString(oneLine(value))
		b.WriteString("\r\n")
	}
	header("From", renderAddress(m.From))
	to := make([]string, len(m.To))
	for i, addr := range m.To {
		to[i] = renderAddress(addr)
	}
	header("To", strings.Join(to, ", "))
	header("Subject", mime.QEncoding.Encode("utf-8", m.Subject))
	header("Date", m.QueuedAt.Format(time.RFC1123Z))
	header("Message-ID", MessageID(m.Key))
	header("X-Cairn-Key", m.Key)
	if m.Reverses != "" {
		header("X-Cairn-Withdraws", m.Reverses)
	}
	if m.Shadow {
		header("X-Cairn-Shadow", "true")
	}
	header("MIME-Version", "1.0")
	header("Content-Type", "text/plain; charset=utf-8")
	header("Content-Transfer-Encoding", "8bit")
	b.WriteString("\r\n")
	b.WriteString(crlf(m.Body))
	return b.Bytes()
}

// MessageID is the Message-ID header value of the message with this key.
func MessageID(key string) string {
	return "<" + strings.ReplaceAll(key, ":", ".") + "@cairn.local>"
}

// renderAddress writes an address the way mail readers expect, encoding a
// non-ASCII display name; an address that does not parse is kept as written.
func renderAddress(s string) string {
	addr, err := mail.ParseAddress(s)
	if err != nil {
		return s
	}
	if addr.Name == "" {
		return addr.Address
	}
	return addr.String()
}

// oneLine keeps a header value from starting a header of its own.
func oneLine(s string) string {
	return strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
}

// crlf turns every line ending into CRLF and ends a non-empty body with one.
func crlf(body string) string {
	if body == "" {
		return ""
	}
	body = strings.ReplaceAll(body, "\r\n", "\n")
	body = strings.ReplaceAll(body, "\r", "\n")
	if !strings.HasSuffix(body, "\n") {
		body += "\n"
	}
	return strings.ReplaceAll(body, "\n", "\r\n")
}
