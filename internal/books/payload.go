package books

import (
	"fmt"
	"strings"

	"github.com/cairnhq/cairn/pkg/idempotency"
)

// field is one column of a row's payload, its value spelt as in an error message.
type field struct{ name, value string }

// fields is a row's payload, in column order.
type fields []field

// String is the whole payload: {name=value ...}. Its bytes are what the payload's digest is of.
func (fs fields) String() string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = f.name + "=" + f.value
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// differing is the columns of fs whose values differ from other's, spelt as String spells them.
func (fs fields) differing(other fields) fields {
	var out fields
	for i, f := range fs {
		if i >= len(other) || other[i] != f {
			out = append(out, f)
		}
	}
	return out
}

// conflict is the ErrConflict of key: the key and both digests, then the columns that differ
// (the whole payloads would not fit a handover note beside the digests).
func conflict(key string, stored, written fields) error {
	c := idempotency.Conflict(key, idempotency.Digest([]byte(stored.String())), idempotency.Digest([]byte(written.String())))
	return fmt.Errorf("%w (stored %s, written %s)", c, stored.differing(written), written.differing(stored))
}
