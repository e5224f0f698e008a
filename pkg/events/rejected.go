package events

import (
	"slices"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
)

// MaxRejectedData is how much of a refused body a [Rejected] keeps.
const MaxRejectedData = 4 * 1024

// Rejected is the data of [TypeRejected], published on [RejectedSubject]:
// a refused input and why.
type Rejected struct {
	Stream  string              `json:"stream,omitempty"`
	Seq     uint64              `json:"seq,omitempty"`
	Subject string              `json:"subject"`
	Reason  string              `json:"reason"`
	Headers map[string][]string `json:"headers,omitempty"`
	Data    string              `json:"data"` // the refused body (truncated to 4 KiB), as text
}

// cutText cuts s to at most limit bytes on a character boundary.
func cutText(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	for limit > 0 && !utf8.RuneStart(s[limit]) {
		limit--
	}
	return s[:limit]
}

// NewRejected describes the refused message m, read from stream at seq
// (empty and 0 for a core publish), with reason (usually the decoding
// error's text, cut to [MaxReason] bytes). The body is cut to [MaxRejectedData] bytes on a character
// boundary.
func NewRejected(stream string, seq uint64, m *nats.Msg, reason string) Rejected {
	data := m.Data
	if len(data) > MaxRejectedData {
		cut := MaxRejectedData
		for cut > MaxRejectedData-utf8.UTFMax && !utf8.RuneStart(data[cut]) {
			cut--
		}
		data = data[:cut]
	}
	var hdr map[string][]string
	if len(m.Header) > 0 {
		hdr = make(map[string][]string, len(m.Header))
		for k, v := range m.Header {
			hdr[k] = slices.Clone(v)
		}
	}
	return Rejected{
		Stream:  stream,
		Seq:     seq,
		Subject: m.Subject,
		Reason:  cutText(reason, MaxReason),
		Headers: hdr,
		Data:    string(data),
	}
}
