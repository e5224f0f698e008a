package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// MaxSize is the largest encoded data accepted by [Decode] and produced by
// [Encode].
const MaxSize = 64 * 1024

// Event is what Cairn sends: a CloudEvent 1.0 in binary mode.
type Event struct {
	ID          string          // ce-id, also the Nats-Msg-Id
	Type        string          // one of the Type* constants
	Source      string          // "/cairn/<service>"
	Subject     string          // the run id (ce-subject)
	Time        time.Time       // ce-time (UTC)
	TraceParent string          // W3C traceparent extension (ce-traceparent), may be empty
	Data        json.RawMessage // the JSON body; datacontenttype application/json
}

// New builds an Event, marshalling data to JSON. data may also be a
// json.RawMessage or a []byte holding JSON, used as they are; empty data is
// {}. t is stored in UTC without its monotonic reading. The event is checked
// as [Encode] checks it.
func New(id, typ, source, runID string, t time.Time, data any) (Event, error) {
	var body []byte
	switch d := data.(type) {
	case json.RawMessage:
		body = d
	case []byte:
		body = d
	default:
		b, err := json.Marshal(data)
		if err != nil {
			return Event{}, fmt.Errorf("%w: marshalling data of %s %q: %w", ErrInvalid, typ, id, err)
		}
		body = b
	}
	e := Event{
		ID:      id,
		Type:    typ,
		Source:  source,
		Subject: runID,
		Time:    t.Round(0).UTC(),
		Data:    normData(body),
	}
	if err := e.check(e.Type == TypeRunStart); err != nil {
		return Event{}, err
	}
	return e, nil
}

// Unmarshal decodes e.Data into v, refusing unknown fields: a field Cairn
// does not know is a typo or a newer producer, and guessing is worse than
// refusing. Errors wrap [ErrInvalid].
func (e Event) Unmarshal(v any) error {
	dec := json.NewDecoder(bytes.NewReader(normData(e.Data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: decoding data of %s %q: %w", ErrInvalid, e.Type, e.ID, err)
	}
	return nil
}

// normData trims JSON white space around the data (structured mode leaves
// some) and makes empty data the empty object, so that a bare
// `nats pub subject ""` is a command without parameters.
func normData(b []byte) json.RawMessage {
	b = bytes.Trim(b, " \t\r\n")
	if len(b) == 0 {
		return json.RawMessage("{}")
	}
	return b
}

// check applies the rules shared by Encode and Decode. An empty subject is
// allowed only when emptySubject is set (a start command without run_id).
// The attribute names are the binary-mode header names.
func (e Event) check(emptySubject bool) error {
	switch {
	case e.ID == "":
		return fmt.Errorf("%w: missing ce-id", ErrInvalid)
	case e.Type == "":
		return fmt.Errorf("%w: missing ce-type", ErrInvalid)
	case e.Source == "":
		return fmt.Errorf("%w: missing ce-source", ErrInvalid)
	case e.Subject == "" && !emptySubject:
		return fmt.Errorf("%w: missing ce-subject", ErrInvalid)
	}
	if !knownType(e.Type) {
		return fmt.Errorf("%w: unknown type %q", ErrInvalid, e.Type)
	}
	if err := checkAttr("ce-id", e.ID); err != nil {
		return fmt.Errorf("%w: %s %q: %w", ErrInvalid, e.Type, e.ID, err)
	}
	if err := checkAttr("ce-source", e.Source); err != nil {
		return fmt.Errorf("%w: %s %q: %w", ErrInvalid, e.Type, e.ID, err)
	}
	if e.Subject != "" {
		if err := ValidID("ce-subject", e.Subject); err != nil {
			return fmt.Errorf("%w: %s %q: %w", ErrInvalid, e.Type, e.ID, err)
		}
	}
	if e.TraceParent != "" {
		if err := checkAttr("ce-traceparent", e.TraceParent); err != nil {
			return fmt.Errorf("%w: %s %q: %w", ErrInvalid, e.Type, e.ID, err)
		}
	}
	// RFC 3339 has four-digit years; a time outside them would not come back.
	if y := e.Time.UTC().Year(); !e.Time.IsZero() && (y < 0 || y > 9999) {
		return fmt.Errorf("%w: %s %q: ce-time %s is outside years 0000-9999", ErrInvalid, e.Type, e.ID, e.Time)
	}
	return checkData(e.Data)
}

func checkData(data []byte) error {
	if len(data) > MaxSize {
		return fmt.Errorf("%w: data is %d bytes, more than %d", ErrInvalid, len(data), MaxSize)
	}
	if !json.Valid(data) {
		// json.Valid says no more; Unmarshal into nothing names the spot.
		var v any
		err := json.Unmarshal(data, &v)
		if err == nil {
			err = errors.New("invalid JSON")
		}
		return fmt.Errorf("%w: data is not JSON: %w", ErrInvalid, err)
	}
	return nil
}
