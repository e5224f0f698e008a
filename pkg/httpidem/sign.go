package httpidem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/cairnhq/cairn/pkg/identity"
)

// The headers of a signed request (see the package doc, "Who calls"): who signs (a service
// registered in cairn-keys), when (RFC 3339, UTC, to the second), and the signature
// (unpadded standard base64 of ed25519 over [identity.DomainHTTP] and the request's
// canonical form).
const (
	CallerHeader    = "Cairn-Caller"
	SignedAtHeader  = "Cairn-Signed-At"
	SignatureHeader = "Cairn-Signature"
)

// DefaultSkew is how far a request's Cairn-Signed-At may be from the server's clock.
const DefaultSkew = 5 * time.Minute

// SignedHeaders are the headers every signature covers, besides the method, the request
// URI, the time and the caller: the key, the body's digest and the fencing headers. An
// absent header is signed as empty, so it cannot be added on the way.
var SignedHeaders = []string{KeyHeader, DigestHeader, DefaultRunHeader, DefaultTokenHeader}

// canonical is what a request's signature covers: one line each for the method, the
// request URI (path and query as sent), the time, the caller, then "name: value" for each
// signed header (values of a repeated header joined with ", ").
func canonical(method, uri, at, caller string, h http.Header, extra []string) []byte {
	var b bytes.Buffer
	b.WriteString(method + "\n" + uri + "\n" + at + "\n" + caller + "\n")
	for _, name := range append(slices.Clip(SignedHeaders), extra...) {
		b.WriteString(strings.ToLower(name) + ": " + strings.Join(h.Values(name), ", ") + "\n")
	}
	return b.Bytes()
}

// Sign signs req as s at now, covering SignedHeaders and the extra headers named. A
// request with a body (body not nil) gets its Content-Digest first; set the body's
// headers (the key, the fence) before signing.
func Sign(req *http.Request, body []byte, s *identity.Signer, now time.Time, extra ...string) {
	if body != nil {
		req.Header.Set(DigestHeader, ContentDigest(body))
	}
	at := now.UTC().Truncate(time.Second).Format(time.RFC3339)
	req.Header.Set(CallerHeader, s.Name())
	req.Header.Set(SignedAtHeader, at)
	sig := s.Sign(identity.DomainHTTP, canonical(req.Method, req.URL.RequestURI(), at, s.Name(), req.Header, extra))
	req.Header.Set(SignatureHeader, sig.Sig)
}

// AuthConfig is how [Authenticate] checks who calls.
type AuthConfig struct {
	// Ring holds the registered keys (identity.OpenRing on the keys bucket).
	Ring *identity.Ring
	// Now is the server's clock (default time.Now); Skew how far a request's time may be
	// from it, either way (default DefaultSkew).
	Now  func() time.Time
	Skew time.Duration
	// MaxBody is the largest body read to check its digest (default DefaultMaxBody); a
	// larger one is refused with 413 naming the limit.
	MaxBody int64
	// Headers are further headers the signatures cover (the client signs the same).
	Headers []string
	Logger  *slog.Logger
}

type callerKey struct{}

// digestKey marks a request whose Content-Digest, if any, Authenticate checked against its
// body (which it requires on a write), so the idempotency middleware does not hash it again.
type digestKey struct{}

func digestChecked(ctx context.Context) bool {
	ok, _ := ctx.Value(digestKey{}).(bool)
	return ok
}

// CallerOf is the service that signed the request of ctx, "" when none did.
func CallerOf(ctx context.Context) string {
	s, _ := ctx.Value(callerKey{}).(string)
	return s
}

// Authenticate is a middleware that lets through only requests signed by a service whose
// key is registered in c.Ring, within c.Skew of the server's clock; the caller is then
// CallerOf(r.Context()). A request with a body must carry its Content-Digest, which is
// checked. Refusals: 401 (not signed, out of date, a signature that does not hold, a
// caller not registered), 400 (a digest missing on a body, or not the body's), 413 (a
// body over MaxBody), 503 (the keys could not be read). Nothing reaches next then.
func Authenticate(c AuthConfig) (func(http.Handler) http.Handler, error) {
	if c.Ring == nil {
		return nil, errors.New("httpidem: authentication without a ring of keys")
	}
	if c.Skew < 0 || c.MaxBody < 0 {
		return nil, errors.New("httpidem: a negative skew or body limit")
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	c.Skew = cmpOr(c.Skew, DefaultSkew)
	c.MaxBody = cmpOr(c.MaxBody, DefaultMaxBody)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			caller, ok := c.check(w, r)
			if ok {
				ctx := context.WithValue(r.Context(), callerKey{}, caller)
				next.ServeHTTP(w, r.WithContext(context.WithValue(ctx, digestKey{}, true)))
			}
		})
	}, nil
}

// check authenticates r, answering it when it is refused.
func (c AuthConfig) check(w http.ResponseWriter, r *http.Request) (string, bool) {
	caller, at, sig := r.Header.Get(CallerHeader), r.Header.Get(SignedAtHeader), r.Header.Get(SignatureHeader)
	if caller == "" || at == "" || sig == "" {
		unauthenticated(w, "sign the request with the calling service's key: "+CallerHeader+", "+SignedAtHeader+" and "+SignatureHeader)
		return "", false
	}
	t, err := time.Parse(time.RFC3339, at)
	if err != nil {
		unauthenticated(w, SignedAtHeader+" is not an RFC 3339 time")
		return "", false
	}
	if now := c.Now(); t.Before(now.Add(-c.Skew)) || t.After(now.Add(c.Skew)) {
		unauthenticated(w, fmt.Sprintf("%s %s is more than %s from the server's clock, %s", SignedAtHeader, at, c.Skew, now.UTC().Format(time.RFC3339)))
		return "", false
	}
	body, ok := readBody(w, r, c.MaxBody, "")
	if !ok {
		return "", false
	}
	digest := r.Header.Get(DigestHeader)
	switch {
	case digest == "" && len(body) > 0, digest == "" && r.Method != http.MethodGet && r.Method != http.MethodHead:
		Problem{Type: TypeDigestMissing, Title: "Content-Digest missing", Status: http.StatusBadRequest,
			Detail: "a signed write carries Content-Digest (sha-256) of its body, which the signature covers"}.Write(w)
		return "", false
	case digest != "":
		if err := CheckDigest(digest, body); err != nil {
			digestProblem(w, err)
			return "", false
		}
	}
	uri := r.RequestURI
	if uri == "" {
		uri = r.URL.RequestURI()
	}
	msg := canonical(r.Method, uri, at, caller, r.Header, c.Headers)
	if err := c.Ring.Verify(r.Context(), identity.DomainHTTP, msg, &identity.Sig{By: caller, Sig: sig}); err != nil {
		if errors.Is(err, identity.ErrBadSignature) || errors.Is(err, identity.ErrUnknownSigner) {
			unauthenticated(w, err.Error())
			return "", false
		}
		c.Logger.ErrorContext(r.Context(), "reading the caller's key", "caller", caller, logErr, err)
		w.Header().Set("Retry-After", "1")
		Problem{Type: TypeStore, Title: "Keys unavailable", Status: http.StatusServiceUnavailable,
			Detail: "the caller's registered key could not be read; retry later"}.Write(w)
		return "", false
	}
	return caller, true
}

// readBody reads r's body up to limit and puts it back for the handlers after; over the
// limit it answers 413 naming it (and key, when there is one).
func readBody(w http.ResponseWriter, r *http.Request, limit int64, key string) ([]byte, bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return []byte{}, true
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			tooLargeProblem(w, limit, key)
			return nil, false
		}
		Problem{Type: TypeKeyInvalid, Title: "Request body unreadable", Status: http.StatusBadRequest, Detail: err.Error()}.Write(w)
		return nil, false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return body, true
}

func tooLargeProblem(w http.ResponseWriter, limit int64, key string) {
	p := Problem{Type: TypeBodyTooLarge, Title: "Request body too large", Status: http.StatusRequestEntityTooLarge,
		Detail: fmt.Sprintf("the body is over %d bytes", limit), Extensions: map[string]any{"max_bytes": limit}}
	if key != "" {
		p.Extensions["key"] = key
	}
	p.Write(w)
}

func digestProblem(w http.ResponseWriter, err error) {
	Problem{Type: TypeDigestMismatch, Title: "Content-Digest mismatch", Status: http.StatusBadRequest,
		Detail: DigestHeader + ": " + err.Error()}.Write(w)
}

func unauthenticated(w http.ResponseWriter, detail string) {
	w.Header().Set("WWW-Authenticate", `Cairn-Signature realm="cairn"`)
	Problem{Type: TypeUnauthenticated, Title: "Not authenticated", Status: http.StatusUnauthorized, Detail: detail}.Write(w)
}

// Forbid answers 403: caller is authenticated and may not make this request.
func Forbid(w http.ResponseWriter, caller, detail string) {
	Problem{Type: TypeForbidden, Title: "Forbidden", Status: http.StatusForbidden, Detail: detail,
		Extensions: map[string]any{"caller": caller}}.Write(w)
}

// Allow is a middleware that lets through only requests whose authenticated caller (see
// [Authenticate]) is one of callers, and answers 403 to the others.
func Allow(callers ...string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			caller := CallerOf(r.Context())
			if caller == "" || !slices.Contains(callers, caller) {
				Forbid(w, caller, fmt.Sprintf("%s may not %s %s (allowed: %s)", callerName(caller), r.Method, r.URL.Path, strings.Join(callers, ", ")))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

func callerName(c string) string {
	if c == "" {
		return "an unauthenticated caller"
	}
	return "service " + c
}
