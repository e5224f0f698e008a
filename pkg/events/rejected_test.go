package events

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
)

func TestNewRejected(t *testing.T) {
	t.Parallel()
	// 4095 ASCII bytes then a 3-byte character straddling the limit.
	data := []byte(strings.Repeat("x", MaxRejectedData-1) + "€" + "tail")
	m := &nats.Msg{Subject: RunStartSubject, Header: nats.Header{"X-A": {"1"}}, Data: data}
	r := NewRejected("CAIRN_RUNS", 9, m, "invalid event: missing ce-type")
	if r.Stream != "CAIRN_RUNS" || r.Seq != 9 || r.Subject != RunStartSubject || r.Reason != "invalid event: missing ce-type" {
		t.Fatalf("rejected = %+v", r)
	}
	if len(r.Data) != MaxRejectedData-1 || !utf8.ValidString(r.Data) {
		t.Fatalf("data is %d bytes (valid UTF-8 %v), want %d cut before the character", len(r.Data), utf8.ValidString(r.Data), MaxRejectedData-1)
	}
	m.Header["X-A"][0] = "changed"
	if r.Headers["X-A"][0] != "1" {
		t.Fatalf("headers share the message's slices")
	}
	if short := NewRejected("", 0, &nats.Msg{Subject: "cairn.runs.start", Data: []byte("{")}, "bad"); short.Data != "{" || short.Headers != nil {
		t.Fatalf("short = %+v", short)
	}
}
