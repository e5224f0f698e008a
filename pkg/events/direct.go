package events

import (
	"bytes"
	"net/url"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The direct codec: the binary-mode messages this framework writes, encoded and decoded
// without the CloudEvents sdk's binding machinery (a generic message, a writer per attribute,
// fmt.Sprint of each value, a map of extensions), which took about 13 µs each way on the
// step runner's path, a tenth of a transition's CPU (`cairn bench transitions --cpuprofile`).
// It writes what the sdk's nats_jetstream binding writes (WriteMsg: ce-<attribute> headers,
// the time in RFC 3339 with nanoseconds, the data as the body) and reads only what it would
// write itself: any other message, or any event it is not sure of, it declines, and the sdk
// path (encodeSDK, decodeSDK) takes it. Its tests hold it to the sdk on every event and
// message they make: the same headers and body, the same Event.

// Header names of the attributes, as the binding prefixes them.
const (
	hdrID          = "ce-id"
	hdrType        = "ce-type"
	hdrSource      = "ce-source"
	hdrSubject     = "ce-subject"
	hdrTime        = "ce-time"
	hdrContentType = "ce-datacontenttype"
	hdrTraceParent = "ce-" + extTraceParent
)

// encodeDirect is Encode's message for a checked event (Encode checked it) whose source the
// sdk would write as it is; ok false otherwise.
func encodeDirect(subject string, e Event) (*nats.Msg, bool) {
	if !plainSource(e.Source) {
		return nil, false
	}
	h := make(nats.Header, 9)
	h[hdrSpecVersion] = []string{"1.0"}
	h[hdrID] = []string{e.ID}
	h[hdrType] = []string{e.Type}
	h[hdrSource] = []string{e.Source}
	if e.Subject != "" {
		h[hdrSubject] = []string{e.Subject}
	}
	if !e.Time.IsZero() {
		h[hdrTime] = []string{e.Time.UTC().Format(time.RFC3339Nano)}
	}
	h[hdrContentType] = []string{ContentType}
	if e.TraceParent != "" {
		h[hdrTraceParent] = []string{e.TraceParent}
	}
	h[jetstream.MsgIDHeader] = []string{e.ID}
	return &nats.Msg{Subject: subject, Header: h, Data: bytes.Clone(e.Data)}, true
}

// plainSource: a source the sdk keeps as it is (a URI reference that url.Parse gives back
// unchanged).
func plainSource(s string) bool {
	u, err := url.Parse(s)
	return err == nil && u.String() == s
}

// decodeDirect is decode's event for a message as encodeDirect writes them: the known
// headers alone, each once, specversion 1.0, datacontenttype application/json, a time in
// RFC 3339, a plain source, and an event that passes check. ok false otherwise, the message left to the sdk (which names what is wrong).
func decodeDirect(m *nats.Msg, emptySubject bool) (Event, bool) {
	if len(m.Data) > MaxSize || len(m.Header) > 9 {
		return Event{}, false
	}
	var e Event
	var stamp string
	for k, v := range m.Header {
		if len(v) != 1 || v[0] == "" {
			return Event{}, false
		}
		switch k {
		case hdrSpecVersion:
			if v[0] != "1.0" {
				return Event{}, false
			}
		case hdrContentType:
			if v[0] != ContentType {
				return Event{}, false
			}
		case hdrID:
			e.ID = v[0]
		case hdrType:
			e.Type = v[0]
		case hdrSource:
			e.Source = v[0]
		case hdrSubject:
			e.Subject = v[0]
		case hdrTime:
			stamp = v[0]
		case hdrTraceParent:
			e.TraceParent = v[0]
		case jetstream.MsgIDHeader:
		default:
			return Event{}, false
		}
	}
	if headerValue(m.Header, hdrSpecVersion) == "" || headerValue(m.Header, hdrContentType) == "" || !plainSource(e.Source) {
		return Event{}, false
	}
	if stamp != "" {
		t, err := time.Parse(time.RFC3339Nano, stamp) // as the sdk parses it (types.ParseTime)
		if err != nil {
			return Event{}, false
		}
		if !t.IsZero() {
			e.Time = t.UTC()
		}
	}
	e.Data = normData(bytes.Clone(m.Data))
	if e.check(emptySubject) != nil {
		return Event{}, false
	}
	return e, true
}
