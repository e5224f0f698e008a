package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/cairnhq/cairn/pkg/assets"

	"github.com/nats-io/nats.go"
)

// SourceNATSCLI is the source given to a command published without
// CloudEvent headers (a plain `nats pub`).
const SourceNATSCLI = "/nats-cli"

// traceParentHeader is the W3C header a plain publish may carry.
const traceParentHeader = "traceparent"

// DecodeCommand decodes a message received on space sp's <root>runs.> subjects
// (cairn.runs.> for assets.Default, the reference night's).
//
// A message without ce-specversion is taken as the data of that subject's
// command type (start -> [TypeRunStart], <run>.approve -> [TypeRunApprove],
// ...); an empty body is {}, anything else must be a JSON object. Its id is
// the data's "request_id" when present, else fallbackID (the caller passes
// "seq-<stream seq>"); its subject is the run id from the NATS subject, or,
// for a start, the data's "run_id" (possibly empty); its source is
// [SourceNATSCLI]; its time is zero (the caller may take the stream's
// timestamp); a "traceparent" header becomes its TraceParent.
//
// A message with ce-specversion is decoded as by [Decode], except that a
// start may have an empty subject; its type must be the subject's command
// type and, on <root>runs.<run_id>.<verb>, its subject must be that run id.
func DecodeCommand(sp assets.Space, m *nats.Msg, fallbackID string) (Event, error) {
	e, err := decodeCommand(sp, m, fallbackID)
	if err != nil {
		return Event{}, fmt.Errorf("decoding command on %q: %w", m.Subject, err)
	}
	return e, nil
}

func decodeCommand(sp assets.Space, m *nats.Msg, fallbackID string) (Event, error) {
	e, err := decodeCommandEvent(sp, m, fallbackID)
	if err != nil {
		return Event{}, err
	}
	if err := checkLimits(e.ID, e.Data); err != nil {
		return Event{}, err
	}
	return e, nil
}

func decodeCommandEvent(sp assets.Space, m *nats.Msg, fallbackID string) (Event, error) {
	runID, verb, err := ParseRunSubject(sp, m.Subject)
	if err != nil {
		return Event{}, err
	}
	typ, _ := CommandType(verb)
	if isCloudEvent(m) {
		e, err := decode(m, verb == VerbStart)
		if err != nil {
			return Event{}, err
		}
		if e.Type != typ {
			return Event{}, fmt.Errorf("%w: type %q does not match the subject's %q", ErrInvalid, e.Type, typ)
		}
		if verb != VerbStart && e.Subject != runID {
			return Event{}, fmt.Errorf("%w: ce-subject %q does not match the subject's run id %q", ErrInvalid, e.Subject, runID)
		}
		return e, nil
	}

	if len(m.Data) > MaxSize {
		return Event{}, fmt.Errorf("%w: data is %d bytes, more than %d", ErrInvalid, len(m.Data), MaxSize)
	}
	data := normData(bytes.Clone(m.Data))
	if err := checkData(data); err != nil {
		return Event{}, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil || fields == nil {
		return Event{}, fmt.Errorf("%w: data is not a JSON object", ErrInvalid)
	}
	id, err := stringField(fields, "request_id")
	if err != nil {
		return Event{}, err
	}
	if id != "" {
		if err := checkAttr("request_id", id); err != nil {
			return Event{}, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	} else if id = fallbackID; id == "" {
		return Event{}, fmt.Errorf("%w: no request_id and no fallback id", ErrInvalid)
	}
	if verb == VerbStart {
		if runID, err = stringField(fields, "run_id"); err != nil {
			return Event{}, err
		}
		if runID != "" {
			if err := ValidID("run_id", runID); err != nil {
				return Event{}, fmt.Errorf("%w: %w", ErrInvalid, err)
			}
		}
	}
	e := Event{
		ID:          id,
		Type:        typ,
		Source:      SourceNATSCLI,
		Subject:     runID,
		TraceParent: headerValue(m.Header, traceParentHeader),
		Data:        data,
	}
	if err := e.check(verb == VerbStart); err != nil {
		return Event{}, err
	}
	return e, nil
}

// stringField returns the string field name of a JSON object, "" when it is
// absent or null.
func stringField(fields map[string]json.RawMessage, name string) (string, error) {
	raw, ok := fields[name]
	if !ok || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("%w: %s is not a string: %s", ErrInvalid, name, raw)
	}
	return s, nil
}
