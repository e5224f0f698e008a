package httpidem

import (
	"encoding/json"
	"maps"
	"net/http"
	"strconv"
)

// The problem types the middleware answers with, as RFC 9457 "type" members.
const (
	TypeKeyMissing   = "https://github.com/cairnhq/cairn/blob/main/README.md#idempotency-key-missing"
	TypeKeyInvalid   = "https://github.com/cairnhq/cairn/blob/main/README.md#idempotency-key-invalid"
	TypeKeyReused    = "https://github.com/cairnhq/cairn/blob/main/README.md#idempotency-key-reused"
	TypeKeyInFlight  = "https://github.com/cairnhq/cairn/blob/main/README.md#idempotency-key-in-flight"
	TypeFenced       = "https://github.com/cairnhq/cairn/blob/main/README.md#fenced"
	TypeFenceInvalid = "https://github.com/cairnhq/cairn/blob/main/README.md#fence-invalid"
	TypeBodyTooLarge = "https://github.com/cairnhq/cairn/blob/main/README.md#body-too-large"
	TypeStore        = "https://github.com/cairnhq/cairn/blob/main/README.md#idempotency-store"

	TypeUnauthenticated = "https://github.com/cairnhq/cairn/blob/main/README.md#unauthenticated"
	TypeForbidden       = "https://github.com/cairnhq/cairn/blob/main/README.md#forbidden"
	TypeDigestMissing   = "https://github.com/cairnhq/cairn/blob/main/README.md#content-digest-missing"
	TypeDigestMismatch  = "https://github.com/cairnhq/cairn/blob/main/README.md#content-digest-mismatch"
)

// ContentTypeProblem is the media type of a problem details body.
const ContentTypeProblem = "application/problem+json"

// Problem is an RFC 9457 problem details object. Extensions are further members (such
// as "key", "token", "highest"); they never replace the standard ones.
type Problem struct {
	Type       string         `json:"type,omitempty"`
	Title      string         `json:"title,omitempty"`
	Status     int            `json:"status,omitempty"`
	Detail     string         `json:"detail,omitempty"`
	Instance   string         `json:"instance,omitempty"`
	Extensions map[string]any `json:"-"`
}

// MarshalJSON writes the standard members and the extensions as one object.
func (p Problem) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, len(p.Extensions)+5)
	maps.Copy(m, p.Extensions)
	for k, v := range map[string]any{"type": p.Type, "title": p.Title, "detail": p.Detail, "instance": p.Instance} {
		if v != "" {
			m[k] = v
		} else {
			delete(m, k)
		}
	}
	if p.Status != 0 {
		m["status"] = p.Status
	} else {
		delete(m, "status")
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads the standard members and keeps the others as extensions.
func (p *Problem) UnmarshalJSON(b []byte) error {
	type plain Problem
	var q plain
	if err := json.Unmarshal(b, &q); err != nil {
		return err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	for _, k := range []string{"type", "title", "status", "detail", "instance"} {
		delete(m, k)
	}
	*p = Problem(q)
	if len(m) > 0 {
		p.Extensions = m
	}
	return nil
}

// Write sends p as the answer, with its status (500 when it has none).
func (p Problem) Write(w http.ResponseWriter) {
	status := p.Status
	if status == 0 {
		status = http.StatusInternalServerError
	}
	b, err := json.Marshal(p)
	if err != nil {
		// Only an extension JSON cannot encode gets here.
		b = []byte(`{"status":` + strconv.Itoa(status) + `,"title":"unencodable problem"}`)
	}
	h := w.Header()
	h.Set("Content-Type", ContentTypeProblem)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Del("Idempotent-Replayed")
	w.WriteHeader(status)
	w.Write(b)
}
