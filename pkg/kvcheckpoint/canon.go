package kvcheckpoint

import (
	"bytes"
	"encoding/json"
	"sync"
	"unicode/utf8"
)

// canonical is a fast RFC 8785 (JCS) canonicalizer for the records this package writes. It
// writes the canonical form of the JSON object src, without its top-level "sum" member, to
// c.out, and keeps that member's raw string. It handles what records hold (objects, arrays,
// strings with any escapes, integers of up to 15 digits, literals) in one pass; on anything
// else (a fraction or exponent, a larger number, a duplicate key, a non-ASCII key, a lone
// surrogate, invalid UTF-8 or invalid JSON) it gives up, and the caller falls back to the
// general path (encoding/json and gowebpki/jcs), whose answer is therefore always the one
// that counts.
// span is out[start:end], stored as raw instead.
type span struct {
	start, end int
	raw        json.RawMessage
}

type canonical struct {
	src    []byte
	pos    int
	out    []byte
	tmp    []byte // scratch for sorting an object's members
	sum    []byte // the top-level "sum" string, as written (no escapes)
	mem    []member
	names  []string // scratch for sorting step names, and params' member names before them
	hasSum bool
	hasSig bool
	sumAt  int // canonicalRecord: where "sum" goes in out, between steps and undo
	sigAt  int // canonicalRecord: where "sig" goes in out, between schema and snapshot
	// canonicalRecord: embedded JSON values (inline outputs, undo scopes) whose canonical
	// form in out differs from how encoding/json stores them, to be stored as it would.
	verbatim []span
}

// member is one member of the object being written, by offsets (no pointers, so sorting
// costs no write barriers): its key in src (ASCII, no escapes), its value in tmp.
type member struct {
	kstart, kend, start, end int
}

var canonPool = sync.Pool{New: func() any { return &canonical{} }}

func getCanonical() *canonical { return canonPool.Get().(*canonical) }

// putCanonical keeps the buffers for the next record, not the input or its sum.
func putCanonical(c *canonical) {
	c.src, c.sum = nil, nil
	canonPool.Put(c)
}

// canonicalize returns ok false when it cannot be sure of the answer (see canonical).
func (c *canonical) canonicalize(src []byte) (ok bool) {
	c.src, c.pos, c.out, c.sum, c.hasSum, c.hasSig = src, 0, c.out[:0], nil, false, false
	c.space()
	if !c.object(true, 0) {
		return false
	}
	c.space()
	return c.pos == len(c.src)
}

func (c *canonical) space() {
	for c.pos < len(c.src) {
		switch c.src[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

const maxDepth = 64

func (c *canonical) value(depth int) bool {
	if c.pos >= len(c.src) || depth > maxDepth {
		return false
	}
	switch b := c.src[c.pos]; {
	case b == '{':
		return c.object(false, depth+1)
	case b == '[':
		return c.array(depth + 1)
	case b == '"':
		return c.str()
	case b == '-' || b >= '0' && b <= '9':
		return c.number()
	default:
		for _, lit := range [...]string{"true", "false", "null"} {
			if bytes.HasPrefix(c.src[c.pos:], []byte(lit)) {
				c.out = append(c.out, lit...)
				c.pos += len(lit)
				return true
			}
		}
		return false
	}
}

// object canonicalizes an object: its members sorted by key. At the top, the "sum" member is
// left out and kept.
func (c *canonical) object(top bool, depth int) bool {
	if c.pos >= len(c.src) || c.src[c.pos] != '{' {
		return false
	}
	c.pos++
	start := len(c.out)
	base := len(c.mem)
	defer func() { c.mem = c.mem[:base] }()
	c.space()
	if c.pos < len(c.src) && c.src[c.pos] == '}' {
		c.pos++
		c.out = append(c.out, "{}"...)
		return true
	}
	for {
		c.space()
		kstart := c.pos + 1
		key, ok := c.key()
		if !ok {
			return false
		}
		c.space()
		if c.pos >= len(c.src) || c.src[c.pos] != ':' {
			return false
		}
		c.pos++
		c.space()
		if top && string(key) == "sum" {
			if c.hasSum || !c.rawString() {
				return false
			}
		} else if top && string(key) == "sig" {
			// The signature is of the sum (sign.go): left out of what the sum covers.
			vstart := len(c.out)
			if c.hasSig || !c.value(depth) {
				return false
			}
			c.out, c.hasSig = c.out[:vstart], true
		} else {
			vstart := len(c.out)
			if !c.value(depth) {
				return false
			}
			c.mem = append(c.mem, member{kstart: kstart, kend: kstart + len(key), start: vstart - start, end: len(c.out) - start})
		}
		c.space()
		if c.pos >= len(c.src) {
			return false
		}
		if c.src[c.pos] == '}' {
			c.pos++
			break
		}
		if c.src[c.pos] != ',' {
			return false
		}
		c.pos++
	}
	ms := c.mem[base:]
	// ASCII keys: byte order is UTF-16 code unit order. Objects are small: insertion sort.
	src := c.src
	for i := 1; i < len(ms); i++ {
		for j := i; j > 0; j-- {
			a, b := ms[j-1], ms[j]
			switch bytes.Compare(src[a.kstart:a.kend], src[b.kstart:b.kend]) {
			case 0:
				return false // a duplicate key: left to the general path
			case 1:
				ms[j-1], ms[j] = b, a
				continue
			}
			break
		}
	}
	c.tmp = append(c.tmp[:0], c.out[start:]...)
	c.out = append(c.out[:start], '{')
	for i, m := range ms {
		if i > 0 {
			c.out = append(c.out, ',')
		}
		c.out = append(c.out, '"')
		c.out = append(c.out, c.src[m.kstart:m.kend]...)
		c.out = append(c.out, '"', ':')
		c.out = append(c.out, c.tmp[m.start:m.end]...)
	}
	c.out = append(c.out, '}')
	return true
}

// key reads an object key that is plain ASCII without escapes (every key of a record).
func (c *canonical) key() ([]byte, bool) {
	if c.pos >= len(c.src) || c.src[c.pos] != '"' {
		return nil, false
	}
	start := c.pos + 1
	for i := start; i < len(c.src); i++ {
		switch b := c.src[i]; {
		case b == '"':
			c.pos = i + 1
			return c.src[start:i], true
		case b == '\\' || b < 0x20 || b >= 0x80:
			return nil, false
		}
	}
	return nil, false
}

// rawString reads the top-level sum: a string without escapes.
func (c *canonical) rawString() bool {
	key, ok := c.key()
	c.sum, c.hasSum = key, ok
	return ok
}

func (c *canonical) array(depth int) bool {
	c.pos++ // '['
	c.out = append(c.out, '[')
	c.space()
	if c.pos < len(c.src) && c.src[c.pos] == ']' {
		c.pos++
		c.out = append(c.out, ']')
		return true
	}
	for {
		c.space()
		if !c.value(depth) {
			return false
		}
		c.space()
		if c.pos >= len(c.src) {
			return false
		}
		switch c.src[c.pos] {
		case ']':
			c.pos++
			c.out = append(c.out, ']')
			return true
		case ',':
			c.pos++
			c.out = append(c.out, ',')
		default:
			return false
		}
	}
}

// number accepts integers of at most 15 digits, which RFC 8785 writes as they are (a
// double holds them exactly); -0 is written 0 and is left to the general path.
func (c *canonical) number() bool {
	i := c.pos
	if c.src[i] == '-' {
		i++
	}
	digits := i
	for i < len(c.src) && c.src[i] >= '0' && c.src[i] <= '9' {
		i++
	}
	n := i - digits
	if n == 0 || n > 15 || n > 1 && c.src[digits] == '0' || c.src[digits] == '0' && digits > c.pos {
		return false
	}
	if i < len(c.src) {
		switch c.src[i] {
		case '.', 'e', 'E':
			return false
		}
	}
	c.out = append(c.out, c.src[c.pos:i]...)
	c.pos = i
	return true
}

// str writes a string as RFC 8785 does: the characters as they are, but for '"', '\\' and
// the control characters, escaped (the short escapes where JSON has them, else \u00xx).
func (c *canonical) str() bool {
	c.pos++ // '"'
	c.out = append(c.out, '"')
	for {
		i := c.pos
		for i < len(c.src) && c.src[i] != '"' && c.src[i] != '\\' && c.src[i] >= 0x20 {
			i++
		}
		chunk := c.src[c.pos:i]
		if i >= len(c.src) || c.src[i] < 0x20 || !utf8.Valid(chunk) {
			return false
		}
		c.out = append(c.out, chunk...)
		c.pos = i
		if c.src[i] == '"' {
			c.pos++
			c.out = append(c.out, '"')
			return true
		}
		if !c.escape() {
			return false
		}
	}
}

// escape reads one escape sequence and writes its character canonically.
func (c *canonical) escape() bool {
	if c.pos+1 >= len(c.src) {
		return false
	}
	e := c.src[c.pos+1]
	c.pos += 2
	var r rune
	switch e {
	case '"', '\\', '/':
		r = rune(e)
	case 'b':
		r = '\b'
	case 'f':
		r = '\f'
	case 'n':
		r = '\n'
	case 'r':
		r = '\r'
	case 't':
		r = '\t'
	case 'u':
		if c.pos+4 > len(c.src) {
			return false
		}
		for _, h := range c.src[c.pos : c.pos+4] {
			var d byte
			switch {
			case h >= '0' && h <= '9':
				d = h - '0'
			case h >= 'a' && h <= 'f':
				d = h - 'a' + 10
			case h >= 'A' && h <= 'F':
				d = h - 'A' + 10
			default:
				return false
			}
			r = r<<4 | rune(d)
		}
		c.pos += 4
		if r >= 0xd800 && r <= 0xdfff {
			return false // surrogates: the general path pairs them or refuses them
		}
	default:
		return false
	}
	if r < 0x20 || r == '"' || r == '\\' {
		c.out = appendEscaped(c.out, byte(r))
	} else {
		c.out = utf8.AppendRune(c.out, r)
	}
	return true
}

// appendEscaped appends b, a control character, '"' or '\\', escaped as RFC 8785 has it.
func appendEscaped(out []byte, b byte) []byte {
	switch b {
	case '"', '\\':
		return append(out, '\\', b)
	case '\b':
		return append(out, '\\', 'b')
	case '\f':
		return append(out, '\\', 'f')
	case '\n':
		return append(out, '\\', 'n')
	case '\r':
		return append(out, '\\', 'r')
	case '\t':
		return append(out, '\\', 't')
	}
	const hex = "0123456789abcdef"
	return append(out, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xf])
}
