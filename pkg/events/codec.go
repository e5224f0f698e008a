package events

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime"

	cejs "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	ce "github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	extTraceParent = "traceparent"
	hdrSpecVersion = "ce-specversion"
)

// Encode returns a message for subject in binary mode: the attributes as
// ce-* headers, the data as the body, and the Nats-Msg-Id header equal to
// e.ID so that JetStream drops a repeated publish. An empty Data is sent as
// {}. The event is checked first (known type, ids, JSON data no larger than
// [MaxSize]); only a start command may have an empty subject.
func Encode(subject string, e Event) (*nats.Msg, error) {
	e.Data = normData(e.Data)
	if err := e.check(e.Type == TypeRunStart); err != nil {
		return nil, fmt.Errorf("encoding for %q: %w", subject, err)
	}
	if m, ok := encodeDirect(subject, e); ok {
		return m, nil
	}
	return encodeSDK(subject, e)
}

// encodeSDK is Encode through the CloudEvents sdk: every event encodeDirect declines, and the
// oracle its tests hold encodeDirect to.
func encodeSDK(subject string, e Event) (*nats.Msg, error) {
	ev := ce.New(ce.CloudEventsVersionV1)
	ev.SetID(e.ID)
	ev.SetType(e.Type)
	ev.SetSource(e.Source)
	if e.Subject != "" {
		ev.SetSubject(e.Subject)
	}
	if !e.Time.IsZero() {
		ev.SetTime(e.Time.UTC())
	}
	if e.TraceParent != "" {
		ev.SetExtension(extTraceParent, e.TraceParent)
	}
	ev.SetDataContentType(ContentType)
	ev.DataEncoded = e.Data
	if err := ev.Validate(); err != nil {
		return nil, fmt.Errorf("encoding %s %q for %q: %w: %w", e.Type, e.ID, subject, ErrInvalid, err)
	}

	var body exactBody
	hdr, err := cejs.WriteMsg(context.Background(), binding.ToMessage(&ev), &body)
	if err != nil {
		return nil, fmt.Errorf("encoding %s %q for %q: %w", e.Type, e.ID, subject, err)
	}
	hdr.Set(jetstream.MsgIDHeader, e.ID)
	return &nats.Msg{Subject: subject, Header: hdr, Data: body.b}, nil
}

// exactBody keeps the body the sdk writes in a slice of its own size (the sdk hands over a
// buffer holding the event's data). A bytes.Buffer would keep at least 512 bytes a message,
// and asynchronous publishers hold many messages until they are stored.
type exactBody struct{ b []byte }

func (w *exactBody) ReadFrom(r io.Reader) (int64, error) {
	if buf, ok := r.(*bytes.Buffer); ok {
		w.b = append(w.b, buf.Next(buf.Len())...)
		return int64(len(w.b)), nil
	}
	b, err := io.ReadAll(r)
	w.b = append(w.b, b...)
	return int64(len(b)), err
}

// Decode validates and decodes a CloudEvent in binary mode (a ce-specversion
// header) or structured mode (the whole event as the JSON body): the data is
// at most [MaxSize] bytes, the specversion is 1.0, id, type, source and
// subject are present, the type is one of the Type constants, the subject
// (the run id) passes [ValidID], the datacontenttype, when given, is
// application/json, and the data is JSON (empty means {}). Extensions other
// than traceparent are ignored. Errors wrap [ErrInvalid] and name the
// problem.
func Decode(m *nats.Msg) (Event, error) {
	e, err := decode(m, false)
	if err != nil {
		return Event{}, fmt.Errorf("decoding message on %q: %w", m.Subject, err)
	}
	return e, nil
}

func decode(m *nats.Msg, emptySubject bool) (Event, error) {
	if e, ok := decodeDirect(m, emptySubject); ok {
		return e, nil
	}
	return decodeSDK(m, emptySubject)
}

// decodeSDK is decode through the CloudEvents sdk: every message decodeDirect declines, and
// the oracle its tests hold decodeDirect to.
func decodeSDK(m *nats.Msg, emptySubject bool) (Event, error) {
	if len(m.Data) > MaxSize {
		return Event{}, fmt.Errorf("%w: data is %d bytes, more than %d", ErrInvalid, len(m.Data), MaxSize)
	}
	// nats.Header.Get indexes the first value; a key without values (only
	// possible in a hand-built message) would panic inside the sdk.
	hdr := make(nats.Header, len(m.Header))
	for k, v := range m.Header {
		if len(v) > 0 {
			hdr[k] = v
		}
	}
	binary := headerValue(hdr, hdrSpecVersion) != ""
	ev, err := binding.ToEvent(context.Background(), cejs.NewMessage(&nats.Msg{Subject: m.Subject, Header: hdr, Data: m.Data}))
	if err != nil {
		if binary {
			return Event{}, fmt.Errorf("%w: reading ce-* headers: %w", ErrInvalid, err)
		}
		return Event{}, fmt.Errorf("%w: reading structured event: %w", ErrInvalid, err)
	}
	if v := ev.SpecVersion(); v != ce.CloudEventsVersionV1 {
		return Event{}, fmt.Errorf("%w: specversion %q is not %s", ErrInvalid, v, ce.CloudEventsVersionV1)
	}
	if ct := ev.DataContentType(); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != ContentType {
			return Event{}, fmt.Errorf("%w: datacontenttype %q is not %s", ErrInvalid, ct, ContentType)
		}
	}
	var trace string
	if v, ok := ev.Extensions()[extTraceParent]; ok {
		if trace, err = types.ToString(v); err != nil {
			return Event{}, fmt.Errorf("%w: traceparent: %w", ErrInvalid, err)
		}
	}
	e := Event{
		ID:          ev.ID(),
		Type:        ev.Type(),
		Source:      ev.Source(),
		Subject:     ev.Subject(),
		TraceParent: trace,
		Data:        normData(bytes.Clone(ev.Data())),
	}
	if t := ev.Time(); !t.IsZero() {
		e.Time = t.UTC()
	}
	if err := e.check(emptySubject); err != nil {
		return Event{}, err
	}
	if err := ev.Validate(); err != nil {
		return Event{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return e, nil
}

// isCloudEvent reports whether m carries a binary-mode CloudEvent.
func isCloudEvent(m *nats.Msg) bool {
	return headerValue(m.Header, hdrSpecVersion) != ""
}

// headerValue is nats.Header.Get without its panic on a key with no values.
func headerValue(h nats.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}
