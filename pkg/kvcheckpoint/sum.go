package kvcheckpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/gowebpki/jcs"
)

// MaxSize is the largest record this package writes.
const MaxSize = 8 * 1024

// Encode marshals r with its sum set: sha256 of the RFC 8785 form of the record without "sum".
func Encode(r *Record) ([]byte, error) {
	r.Sum = ""
	raw, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encoding checkpoint %q: %w", r.RunID, err)
	}
	sum, err := sumOf(raw)
	if err != nil {
		return nil, fmt.Errorf("summing checkpoint %q: %w", r.RunID, err)
	}
	r.Sum = sum
	out, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encoding checkpoint %q: %w", r.RunID, err)
	}
	if len(out) > MaxSize {
		return nil, fmt.Errorf("checkpoint %q is %d bytes: %w", r.RunID, len(out), ErrTooLarge)
	}
	return out, nil
}

// Decode checks the sum on the parsed JSON, before it is decoded into structs, then decodes.
func Decode(b []byte) (*Record, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: not a JSON object: %v", ErrCorrupt, err)
	}
	var stored string
	if err := json.Unmarshal(m["sum"], &stored); err != nil || stored == "" {
		return nil, fmt.Errorf("%w: no sum", ErrCorrupt)
	}
	want, err := sumOf(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if want != stored {
		return nil, fmt.Errorf("%w: sum is %s, content sums to %s", ErrCorrupt, stored, want)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if r.Schema != Schema {
		return nil, fmt.Errorf("%w: schema %d, want %d", ErrCorrupt, r.Schema, Schema)
	}
	for _, s := range r.Pipeline {
		if r.Steps[s] == nil {
			return nil, fmt.Errorf("%w: step %q of the pipeline has no entry", ErrCorrupt, s)
		}
	}
	return &r, nil
}

// sumOf returns the sum of a JSON object with its "sum" member removed.
func sumOf(b []byte) (string, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return "", err
	}
	delete(m, "sum")
	without, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	canon, err := jcs.Transform(without)
	if err != nil {
		return "", err
	}
	h := sha256.Sum256(canon)
	return "sha256:" + hex.EncodeToString(h[:]), nil
}
