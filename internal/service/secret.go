package service

import (
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
)

// Secret is a setting that must never be shown: a token, a key, a webhook's signing
// secret. Printed with any verb of package fmt, logged through log/slog or marshalled
// (JSON, text) it is "[redacted]", or empty when unset; only string(s) gives the value,
// where it is used.
type Secret string

func (s Secret) shown() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

func (s Secret) String() string                { return s.shown() }
func (s Secret) GoString() string              { return fmt.Sprintf("%q", s.shown()) }
func (s Secret) Format(f fmt.State, verb rune) { format(f, verb, s.shown()) }
func (s Secret) LogValue() slog.Value          { return slog.StringValue(s.shown()) }
func (s Secret) MarshalText() ([]byte, error)  { return []byte(s.shown()), nil }

// Credentials is a setting that may carry a password: a NATS server list
// (nats://USER:PASSWORD@HOST:PORT, comma-separated) or a database DSN
// (postgres://USER:PASSWORD@HOST/DB, sqlite:PATH). Printed, logged or marshalled, its
// passwords are "xxxxx"; the rest (user, host, database, path) stays readable. Only
// string(c) gives the value, where it is used.
type Credentials string

func (c Credentials) shown() string { return redactURLs(string(c)) }

func (c Credentials) String() string                { return c.shown() }
func (c Credentials) GoString() string              { return fmt.Sprintf("%q", c.shown()) }
func (c Credentials) Format(f fmt.State, verb rune) { format(f, verb, c.shown()) }
func (c Credentials) LogValue() slog.Value          { return slog.StringValue(c.shown()) }
func (c Credentials) MarshalText() ([]byte, error)  { return []byte(c.shown()), nil }

// passwords are the passwords c holds (in user:pass@ or a secret query parameter).
func (c Credentials) passwords() []string {
	var out []string
	for p := range strings.SplitSeq(string(c), ",") {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil {
			continue
		}
		if pw, ok := u.User.Password(); ok && pw != "" {
			out = append(out, pw)
		}
		for name, vs := range u.Query() {
			if isSecretParam(name) {
				out = append(out, vs...)
			}
		}
	}
	return out
}

// format prints shown under the verb and flags f was given (%s, %q, %v, %-20s, ...); any
// other verb prints as %s.
func format(f fmt.State, verb rune, shown string) {
	if verb != 's' && verb != 'q' && verb != 'v' {
		verb = 's'
	}
	fmt.Fprintf(f, fmt.FormatString(f, verb), shown)
}

// redactURLs hides the passwords of a comma-separated list of URLs. A part that is no
// URL (sqlite:PATH) stays as it is; a URL that does not parse is not shown at all, since
// its password cannot be told from the rest.
func redactURLs(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		if !strings.Contains(p, "://") {
			continue
		}
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil {
			parts[i] = "(a URL that does not parse, not shown)"
			continue
		}
		redactQuery(u)
		parts[i] = u.Redacted()
	}
	return strings.Join(parts, ",")
}

// secretParams are the query parameters of a DSN that carry a secret (PostgreSQL's
// password=, sslpassword=, and the like).
var secretParams = []string{"password", "pass", "passwd", "pwd", "sslpassword", "secret", "token", "key", "sslkey"}

// isSecretParam says whether a query parameter carries a secret.
func isSecretParam(name string) bool {
	return slices.Contains(secretParams, strings.ToLower(name))
}

// redactQuery replaces the value of every secret query parameter of u with xxxxx.
func redactQuery(u *url.URL) {
	if u.RawQuery == "" {
		return
	}
	q := u.Query()
	changed := false
	for name := range q {
		if isSecretParam(name) {
			for i := range q[name] {
				q[name][i] = "xxxxx"
			}
			changed = true
		}
	}
	if changed {
		u.RawQuery = q.Encode()
	}
}

// scrubbed is err with every appearance of the secrets in its text (as given and
// URL-escaped) replaced; errors.Is and errors.As still see err.
func scrubbed(err error, secrets ...string) error {
	var keep []string
	for _, s := range secrets {
		if s != "" {
			keep = append(keep, s, url.QueryEscape(s), url.PathEscape(s))
		}
	}
	if err == nil || len(keep) == 0 {
		return err
	}
	return scrubError{err: err, secrets: keep}
}

type scrubError struct {
	err     error
	secrets []string
}

func (e scrubError) Error() string {
	text := e.err.Error()
	for _, s := range e.secrets {
		text = strings.ReplaceAll(text, s, "xxxxx")
	}
	return text
}

func (e scrubError) Unwrap() error { return e.err }
