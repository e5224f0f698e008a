package httpidem_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/cairnhq/cairn/pkg/httpidem"
)

func TestParseKey(t *testing.T) {
	for _, c := range []struct {
		in, want string
		err      error
	}{
		{`"abc"`, "abc", nil},
		{`  "a b"	`, "a b", nil},
		{`"q\"uote\\d"`, `q"uote\d`, nil},
		{`8e03978e-40d5-43e8-bc93-6894a57f9324`, "8e03978e-40d5-43e8-bc93-6894a57f9324", nil},
		{`run:post:42`, "run:post:42", nil},
		{``, "", httpidem.ErrInvalidKey},
		{`""`, "", httpidem.ErrInvalidKey},
		{`"abc`, "", httpidem.ErrInvalidKey},
		{`"a\nb"`, "", httpidem.ErrInvalidKey},
		{"\"a\tb\"", "", httpidem.ErrInvalidKey},
		{"\"a\x7fb\"", "", httpidem.ErrInvalidKey},
		{"\"caf\xc3\xa9\"", "", httpidem.ErrInvalidKey},
		{`"a"b`, "", httpidem.ErrInvalidKey},
		{`"a";x=1`, "", httpidem.ErrInvalidKey},
		{`a b`, "", httpidem.ErrInvalidKey},
		{`a,b`, "", httpidem.ErrInvalidKey},
		{`a"b`, "", httpidem.ErrInvalidKey},
		{`"` + strings.Repeat("k", httpidem.MaxKeyLen) + `"`, strings.Repeat("k", httpidem.MaxKeyLen), nil},
		{`"` + strings.Repeat("k", httpidem.MaxKeyLen+1) + `"`, "", httpidem.ErrKeyTooLong},
		{strings.Repeat("k", httpidem.MaxKeyLen+1), "", httpidem.ErrKeyTooLong},
	} {
		got, err := httpidem.ParseKey(c.in)
		if got != c.want || !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
			t.Errorf("ParseKey(%.40q) = %q, %v; want %q, %v", c.in, got, err, c.want, c.err)
		}
	}
}

func TestParseFence(t *testing.T) {
	for _, c := range []struct {
		run, token string
		ok         bool
		err        bool
	}{
		{"", "", false, false},
		{"r", "0", true, false},
		{"r", "9223372036854775807", true, false},
		{"r", "9223372036854775808", false, true},
		{"r", "-1", false, true},
		{"r", "+1", false, true},
		{"r", "1.0", false, true},
		{"r", "", false, true},
		{"", "1", false, true},
		{"r r", "1", false, true},
		{strings.Repeat("r", httpidem.MaxRunLen+1), "1", false, true},
	} {
		_, _, ok, err := httpidem.ParseFence(c.run, c.token)
		if ok != c.ok || (err != nil) != c.err || (err != nil && !errors.Is(err, httpidem.ErrInvalidFence)) {
			t.Errorf("ParseFence(%.20q, %q) = %v, %v; want ok %v, error %v", c.run, c.token, ok, err, c.ok, c.err)
		}
	}
}

// FuzzParseKey: no field value panics the parser; an accepted key is 1 to MaxKeyLen
// printable ASCII bytes from a value without control bytes; formatting it and parsing
// that gives it back.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{`"abc"`, `abc`, `"a\"b\\c"`, `""`, `"a`, `"a\x"`, "\"a\x00b\"", " \"k\" ", `"k";p`, `a,b`, "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		key, err := httpidem.ParseKey(in)
		if err != nil {
			if !errors.Is(err, httpidem.ErrInvalidKey) && !errors.Is(err, httpidem.ErrKeyTooLong) {
				t.Fatalf("ParseKey(%q): %v is neither ErrInvalidKey nor ErrKeyTooLong", in, err)
			}
			return
		}
		if key == "" || len(key) > httpidem.MaxKeyLen {
			t.Fatalf("ParseKey(%q) = %q: %d bytes", in, key, len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("ParseKey(%q) = %q: byte 0x%02x", in, key, key[i])
			}
		}
		trimmed := strings.Trim(in, " \t")
		for i := 0; i < len(trimmed); i++ {
			if trimmed[i] < 0x20 || trimmed[i] > 0x7e {
				t.Fatalf("ParseKey(%q) accepted byte 0x%02x", in, trimmed[i])
			}
		}
		v, err := httpidem.FormatKey(key)
		if err != nil {
			t.Fatalf("FormatKey(%q): %v", key, err)
		}
		again, err := httpidem.ParseKey(v)
		if err != nil || again != key {
			t.Fatalf("ParseKey(FormatKey(%q)) = %q, %v", key, again, err)
		}
		if v2, _ := httpidem.FormatKey(again); v2 != v {
			t.Fatalf("FormatKey is not stable: %q, %q", v, v2)
		}
	})
}

// FuzzParseFence: no pair of header values panics the parser; an accepted token
// formats back to the same digits, less leading zeros.
func FuzzParseFence(f *testing.F) {
	f.Add("run-1", "5")
	f.Add("", "")
	f.Add("r", "-1")
	f.Add("r", "99999999999999999999")
	f.Fuzz(func(t *testing.T, run, token string) {
		r, n, ok, err := httpidem.ParseFence(run, token)
		if err != nil {
			if !errors.Is(err, httpidem.ErrInvalidFence) || ok {
				t.Fatalf("ParseFence(%q, %q) = %v, %v", run, token, ok, err)
			}
			return
		}
		if !ok {
			if strings.Trim(run, " \t") != "" || strings.Trim(token, " \t") != "" {
				t.Fatalf("ParseFence(%q, %q): no fence from non-empty headers", run, token)
			}
			return
		}
		if n < 0 || r == "" || len(r) > httpidem.MaxRunLen || strings.ContainsAny(r, " \t\r\n") {
			t.Fatalf("ParseFence(%q, %q) = %q, %d", run, token, r, n)
		}
	})
}
