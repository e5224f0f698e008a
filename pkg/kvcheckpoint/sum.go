package kvcheckpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/gowebpki/jcs"

	"github.com/cairnhq/cairn/pkg/identity"
)

// MaxSize is the largest record this package writes.
const MaxSize = 8 * 1024

// sumTail is how a record marshalled with no signature and an empty sum ends: Sum is its
// last field, after Sig (left out when nil).
var sumTail = []byte(`"sum":""}`)

// Encode marshals r with its sum set: sha256 of the RFC 8785 form of the record without "sum"
// and "sig". It stores that canonical form itself, with the sum (and a signature) in its
// sorted place and embedded values (inline outputs) as encoding/json stores them, so a record
// is written once, not marshalled and then canonicalized. The record is unsigned (no sig); a
// Store with a signer signs what it writes.
func Encode(r *Record) ([]byte, error) { return encode(r, nil) }

// encode is Encode, signed by sg when it is not nil.
func encode(r *Record, sg *identity.Signer) ([]byte, error) {
	b, _, err := encodeSized(r, sg)
	return b, err
}

// encodeSized is encode, and r's Size as it was written when the straight writer took it (0
// otherwise): what StepRoomSized needs to measure r's room without encoding it again.
func encodeSized(r *Record, sg *identity.Signer) ([]byte, int, error) {
	r.Sum, r.Sig = "", nil
	c := getCanonical()
	defer putCanonical(c)
	if c.canonicalRecord(r) {
		size := c.storedLen(sumLen) + signatureRoom
		r.Sum = digest(c.out)
		b, err := checkSize(r, c.stored(r.Sum, sign(r, sg)))
		return b, size, err
	}
	b, err := encodeGeneral(r, sg)
	return b, 0, err
}

func encodeGeneral(r *Record, sg *identity.Signer) ([]byte, error) {
	raw, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encoding checkpoint %q: %w", r.RunID, err)
	}
	sum, err := recordSum(r, raw)
	if err != nil {
		return nil, fmt.Errorf("summing checkpoint %q: %w", r.RunID, err)
	}
	r.Sum = sum
	sig := sign(r, sg)
	var out []byte
	if bytes.HasSuffix(raw, sumTail) {
		// The signature and the sum go where the empty ones were: one marshal, not two.
		out = raw[: len(raw)-len(sumTail) : len(raw)-len(sumTail)]
		if sig != nil {
			out = append(append(append(out, `"sig":`...), sig...), ',')
		}
		out = append(out, `"sum":"`+sum+`"}`...)
	} else if out, err = json.Marshal(r); err != nil {
		return nil, fmt.Errorf("encoding checkpoint %q: %w", r.RunID, err)
	}
	return checkSize(r, out)
}

func checkSize(r *Record, out []byte) ([]byte, error) {
	if len(out) > MaxSize {
		return nil, &tooLarge{runID: r.RunID, size: len(out)}
	}
	return out, nil
}

// Decode checks the sum on the parsed JSON as stored, before it is decoded into structs, then
// decodes, and upgrades a record of an earlier schema in memory. A record of a later schema
// than Schema is ErrNewerSchema.
func Decode(b []byte) (*Record, error) {
	r, _, err := decodeStored(b)
	return r, err
}

// decodeStored is Decode, also returning the schema the record was stored in.
func decodeStored(b []byte) (*Record, int, error) {
	r, err := decodeAny(b)
	if err != nil {
		return nil, 0, err
	}
	schema := r.Schema
	if err := checkSchema(r); err != nil {
		return nil, 0, err
	}
	for _, s := range r.Pipeline {
		if r.Steps[s] == nil {
			return nil, 0, fmt.Errorf("%w: step %q of the pipeline has no entry", ErrCorrupt, s)
		}
	}
	return r, schema, nil
}

// decodeAny checks b's sum and decodes it, in whatever schema it is.
func decodeAny(b []byte) (*Record, error) {
	stored, want, plain, err := checkSum(b)
	if err != nil {
		return nil, err
	}
	if want != stored {
		return nil, fmt.Errorf("%w: sum is %s, content sums to %s", ErrCorrupt, stored, want)
	}
	r, ok := (*Record)(nil), false
	if plain {
		r, ok = decodeRecord(b)
	}
	if !ok {
		r = &Record{}
		if err := json.Unmarshal(b, r); err != nil {
			if nerr := newerSchema(b); nerr != nil {
				return nil, nerr
			}
			return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		if err := oldSnapshot(b, r); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
	}
	return r, nil
}

// checkSum parses b and returns the sum it carries and the sum of its content; plain says
// the fast canonicalizer took it (see decodeRecord).
func checkSum(b []byte) (stored, want string, plain bool, err error) {
	c := getCanonical()
	defer putCanonical(c)
	if c.canonicalize(b) {
		if !c.hasSum || len(c.sum) == 0 {
			return "", "", false, fmt.Errorf("%w: no sum", ErrCorrupt)
		}
		return string(c.sum), digest(c.out), true, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return "", "", false, fmt.Errorf("%w: not a JSON object: %v", ErrCorrupt, err)
	}
	if err := json.Unmarshal(m["sum"], &stored); err != nil || stored == "" {
		return "", "", false, fmt.Errorf("%w: no sum", ErrCorrupt)
	}
	if want, err = sumOfJCS(b); err != nil {
		return "", "", false, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return stored, want, false, nil
}

// recordSum is the sum of r, whose encoding with an empty sum is raw: written straight
// from the struct where it can be, else from raw.
func recordSum(r *Record, raw []byte) (string, error) {
	c := getCanonical()
	defer putCanonical(c)
	if c.canonicalRecord(r) {
		return digest(c.out), nil
	}
	return sumOf(raw)
}

// sumOf returns the sum of a JSON object with its "sum" member removed.
func sumOf(b []byte) (string, error) {
	c := getCanonical()
	defer putCanonical(c)
	if c.canonicalize(b) {
		return digest(c.out), nil
	}
	return sumOfJCS(b)
}

func digest(canon []byte) string {
	h := sha256.Sum256(canon)
	return "sha256:" + hex.EncodeToString(h[:])
}

// sumOfJCS is sumOf by the general path: encoding/json, then gowebpki/jcs.
func sumOfJCS(b []byte) (string, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return "", err
	}
	delete(m, "sum")
	delete(m, "sig")
	without, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	canon, err := jcs.Transform(without)
	if err != nil {
		return "", err
	}
	return digest(canon), nil
}
