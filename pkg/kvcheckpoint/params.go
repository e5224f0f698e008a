package kvcheckpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
)

// Params are what the run was started with: the pipeline's own members (Input, each a JSON
// value, validated by the pipeline at the start and carried as given), and Shadow, whether
// the run is a shadow run, which is the framework's. In JSON they are one flat object,
// "shadow" among the pipeline's members: the night's is
// {"date":"2026-10-13","shadow":false,"source":"mailbox-ap"}.
type Params struct {
	Input  map[string]json.RawMessage
	Shadow bool
}

// ShadowMember is the member of Params that is the framework's; no pipeline's input may
// name it.
const ShadowMember = "shadow"

// ErrParams means params that are not a flat object of the pipeline's members and a
// boolean "shadow".
var ErrParams = errors.New("invalid params")

// StringParams is the Params of string members, given as name, value pairs.
func StringParams(shadow bool, pairs ...string) Params {
	p := Params{Shadow: shadow}
	for i := 0; i+1 < len(pairs); i += 2 {
		if p.Input == nil {
			p.Input = map[string]json.RawMessage{}
		}
		b, _ := json.Marshal(pairs[i+1])
		p.Input[pairs[i]] = b
	}
	return p
}

// String is the value of the string member name; "" when it is absent or not a string.
func (p Params) String(name string) string {
	var s string
	if raw, ok := p.Input[name]; !ok || json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// Names are the pipeline's members, sorted.
func (p Params) Names() []string { return slices.Sorted(maps.Keys(p.Input)) }

// Clone is a deep copy.
func (p Params) Clone() Params {
	out := Params{Shadow: p.Shadow}
	if p.Input != nil {
		out.Input = make(map[string]json.RawMessage, len(p.Input))
		for k, v := range p.Input {
			out.Input[k] = bytes.Clone(v)
		}
	}
	return out
}

// Equal reports whether p and q are the same params: the same members with the same JSON
// values, compacted, and the same Shadow.
func (p Params) Equal(q Params) bool {
	if p.Shadow != q.Shadow || len(p.Input) != len(q.Input) {
		return false
	}
	for k, v := range p.Input {
		w, ok := q.Input[k]
		if !ok || !sameJSON(v, w) {
			return false
		}
	}
	return true
}

func sameJSON(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var ca, cb bytes.Buffer
	return json.Compact(&ca, a) == nil && json.Compact(&cb, b) == nil && bytes.Equal(ca.Bytes(), cb.Bytes())
}

// Ordered is the params as JSON with the members of order first, in that order, then the
// others sorted, then "shadow": the bytes a step's input fingerprint hashes. A pipeline
// that declares its input's order (pipeline.Definition.Input) keeps one fingerprint for one
// input, however its record orders the members.
func (p Params) Ordered(order []string) []byte {
	b := []byte{'{'}
	member := func(name string, v []byte) {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, name) // names are ids: quoting is JSON's
		b = append(append(b, ':'), v...)
	}
	for _, k := range order {
		if v, ok := p.Input[k]; ok {
			member(k, compact(v))
		}
	}
	for _, k := range p.Names() {
		if !slices.Contains(order, k) {
			member(k, compact(p.Input[k]))
		}
	}
	member(ShadowMember, strconv.AppendBool(nil, p.Shadow))
	return append(b, '}')
}

func compact(v json.RawMessage) []byte {
	var c bytes.Buffer
	if json.Compact(&c, v) != nil {
		return v
	}
	return c.Bytes()
}

// MarshalJSON writes the flat object, members sorted.
func (p Params) MarshalJSON() ([]byte, error) {
	m := make(map[string]json.RawMessage, len(p.Input)+1)
	for k, v := range p.Input {
		if k == ShadowMember {
			return nil, fmt.Errorf("%w: the pipeline's input names %q, the framework's member", ErrParams, k)
		}
		m[k] = v
	}
	m[ShadowMember] = json.RawMessage(strconv.FormatBool(p.Shadow))
	return json.Marshal(m) // encoding/json sorts a map's keys
}

// UnmarshalJSON reads the flat object; "shadow", when present, must be a boolean.
func (p *Params) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("%w: %w", ErrParams, err)
	}
	if m == nil {
		return fmt.Errorf("%w: not an object", ErrParams)
	}
	out := Params{}
	if v, ok := m[ShadowMember]; ok {
		if err := json.Unmarshal(v, &out.Shadow); err != nil {
			return fmt.Errorf("%w: shadow is not a boolean", ErrParams)
		}
		delete(m, ShadowMember)
	}
	if len(m) > 0 {
		out.Input = m
	}
	*p = out
	return nil
}
