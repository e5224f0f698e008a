package httpidem

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxKeyLen is the longest key accepted, in bytes once unquoted. The draft sets no limit;
// a bound keeps the store's primary key small.
const MaxKeyLen = 255

// MaxRunLen is the longest run id accepted in the run header, in bytes.
const MaxRunLen = 255

// ParseKey reads an Idempotency-Key field value and returns the key it carries.
//
// The draft makes the value an RFC 8941 sf-string: a double-quoted string of printable
// ASCII (0x20-0x7E) where only \" and \\ are escapes. ParseKey accepts that form, and
// for compatibility with clients that send bare keys (Stripe's do) also a bare key: one
// or more visible ASCII characters (0x21-0x7E) other than ", \, "," and ";", which would
// make the value ambiguous as a structured field. Spaces and tabs around the value are
// ignored; structured-field parameters after the string are refused. The key is never
// empty and at most [MaxKeyLen] bytes.
func ParseKey(v string) (string, error) {
	v = strings.Trim(v, " \t")
	if v == "" {
		return "", fmt.Errorf("empty value: %w", ErrInvalidKey)
	}
	var key string
	if v[0] == '"' {
		k, rest, err := parseString(v)
		if err != nil {
			return "", err
		}
		if rest != "" {
			return "", fmt.Errorf("%d bytes after the closing quote: %w", len(rest), ErrInvalidKey)
		}
		key = k
	} else {
		for i := 0; i < len(v); i++ {
			if c := v[i]; !bareChar(c) {
				return "", fmt.Errorf("byte 0x%02x at %d of a bare key: %w", c, i, ErrInvalidKey)
			}
		}
		key = v
	}
	switch {
	case key == "":
		return "", fmt.Errorf("empty key: %w", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return "", fmt.Errorf("%d bytes, at most %d allowed: %w", len(key), MaxKeyLen, ErrKeyTooLong)
	}
	return key, nil
}

// parseString reads the sf-string at the start of v (which begins with '"') and returns
// it unescaped and what follows it.
func parseString(v string) (string, string, error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i == len(v) {
				return "", "", fmt.Errorf("escape at the end of the value: %w", ErrInvalidKey)
			}
			if e := v[i]; e != '"' && e != '\\' {
				return "", "", fmt.Errorf("escape \\%c at %d (only \\\" and \\\\ are allowed): %w", e, i-1, ErrInvalidKey)
			}
			b.WriteByte(v[i])
		case c == '"':
			return b.String(), v[i+1:], nil
		case c < 0x20 || c > 0x7e:
			return "", "", fmt.Errorf("byte 0x%02x at %d of a quoted key: %w", c, i, ErrInvalidKey)
		default:
			if b.Len() >= MaxKeyLen {
				return "", "", fmt.Errorf("more than %d bytes: %w", MaxKeyLen, ErrKeyTooLong)
			}
			b.WriteByte(c)
		}
	}
	return "", "", fmt.Errorf("no closing quote: %w", ErrInvalidKey)
}

func bareChar(c byte) bool {
	return c > 0x20 && c < 0x7f && c != '"' && c != '\\' && c != ',' && c != ';'
}

// FormatKey is the sf-string field value that carries key, as a client sends it.
func FormatKey(key string) (string, error) {
	switch {
	case key == "":
		return "", fmt.Errorf("empty key: %w", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return "", fmt.Errorf("%d bytes, at most %d allowed: %w", len(key), MaxKeyLen, ErrKeyTooLong)
	}
	var b strings.Builder
	b.Grow(len(key) + 2)
	b.WriteByte('"')
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c < 0x20 || c > 0x7e {
			return "", fmt.Errorf("byte 0x%02x at %d: %w", c, i, ErrInvalidKey)
		}
		if c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	b.WriteByte('"')
	return b.String(), nil
}

// ParseFence reads the run header's and the token header's values. Both absent means no
// fence (ok false); one without the other is an error. The token is a decimal integer
// from 0 to 2^63-1 with no sign; the run id is 1 to [MaxRunLen] visible ASCII bytes.
func ParseFence(run, token string) (string, int64, bool, error) {
	run, token = strings.Trim(run, " \t"), strings.Trim(token, " \t")
	switch {
	case run == "" && token == "":
		return "", 0, false, nil
	case run == "":
		return "", 0, false, fmt.Errorf("a fencing token without a run id: %w", ErrInvalidFence)
	case token == "":
		return "", 0, false, fmt.Errorf("a run id without a fencing token: %w", ErrInvalidFence)
	case len(run) > MaxRunLen:
		return "", 0, false, fmt.Errorf("run id of %d bytes, at most %d allowed: %w", len(run), MaxRunLen, ErrInvalidFence)
	}
	for i := 0; i < len(run); i++ {
		if c := run[i]; c <= 0x20 || c >= 0x7f {
			return "", 0, false, fmt.Errorf("byte 0x%02x at %d of the run id: %w", c, i, ErrInvalidFence)
		}
	}
	for i := 0; i < len(token); i++ {
		if c := token[i]; c < '0' || c > '9' {
			return "", 0, false, fmt.Errorf("fencing token %q is not a decimal integer: %w", token, ErrInvalidFence)
		}
	}
	n, err := strconv.ParseInt(token, 10, 64)
	if err != nil {
		return "", 0, false, fmt.Errorf("fencing token %q beyond 63 bits: %w", token, ErrInvalidFence)
	}
	return run, n, true, nil
}
