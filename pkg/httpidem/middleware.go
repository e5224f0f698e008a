package httpidem

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/cairnhq/cairn/pkg/idempotency"
)

// Middleware makes handlers idempotent: see the package doc.
type Middleware struct {
	store Store
	cfg   config
}

// New is a middleware over store.
func New(store Store, opts ...Option) *Middleware {
	m := &Middleware{store: store, cfg: defaults()}
	for _, o := range opts {
		o(&m.cfg)
	}
	return m
}

// Wrap returns next made idempotent.
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
}

// Log attribute keys.
const (
	logKey = "key"
	logErr = "err"
)

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if !m.cfg.methods[r.Method] {
		next.ServeHTTP(w, r)
		return
	}
	values := r.Header.Values(KeyHeader)
	switch {
	case len(values) == 0 && !m.cfg.required:
		next.ServeHTTP(w, r)
		return
	case len(values) == 0:
		Problem{Type: TypeKeyMissing, Title: "Idempotency-Key missing", Status: http.StatusBadRequest,
			Detail: "this resource requires an Idempotency-Key header on " + r.Method}.Write(w)
		return
	case len(values) > 1:
		Problem{Type: TypeKeyInvalid, Title: "Idempotency-Key invalid", Status: http.StatusBadRequest,
			Detail: fmt.Sprintf("%d Idempotency-Key fields, one allowed", len(values))}.Write(w)
		return
	}
	key, err := ParseKey(values[0])
	if err != nil {
		Problem{Type: TypeKeyInvalid, Title: "Idempotency-Key invalid", Status: http.StatusBadRequest,
			Detail: "Idempotency-Key: " + err.Error(), Extensions: map[string]any{"max_length": MaxKeyLen}}.Write(w)
		return
	}
	run, token, fenced, err := ParseFence(r.Header.Get(m.cfg.runHeader), r.Header.Get(m.cfg.tokenHeader))
	if err != nil {
		Problem{Type: TypeFenceInvalid, Title: "Fencing headers invalid", Status: http.StatusBadRequest,
			Detail: m.cfg.runHeader + ", " + m.cfg.tokenHeader + ": " + err.Error()}.Write(w)
		return
	}
	body, ok := readBody(w, r, m.cfg.maxBody, key)
	if !ok {
		return
	}
	if d := r.Header.Get(DigestHeader); d != "" && !digestChecked(r.Context()) {
		// A body changed on the way is refused before anything is claimed.
		if err := CheckDigest(d, body); err != nil {
			digestProblem(w, err)
			return
		}
	}
	if m.cfg.selfFenced {
		fenced = false // the handler's own fence holds the run (WithoutFence)
	}
	stored := key
	if m.cfg.scope != nil {
		scope := m.cfg.scope(r)
		if strings.ContainsAny(scope, "\r\n") {
			m.cfg.log.ErrorContext(r.Context(), "a scope with a newline", logKey, key)
			storeProblem(w, key)
			return
		}
		stored = scope + "\n" + key
	}
	now := m.cfg.now()
	c := Claim{
		Key: stored, Fingerprint: m.fingerprint(r, body), ID: claimID(),
		Now: now, Expires: now.Add(m.cfg.expiry),
		Fenced: fenced, Run: run, Token: token,
	}
	out, err := m.store.Claim(r.Context(), c)
	if err != nil {
		m.cfg.log.ErrorContext(r.Context(), "claiming an idempotency key", logKey, key, logErr, err)
		storeProblem(w, key)
		return
	}
	switch out.State {
	case FencedOut:
		Problem{Type: TypeFenced, Title: "Fenced", Status: http.StatusConflict,
			Detail:     fmt.Sprintf("fencing token %d of run %q is below the highest token seen for it, %d", token, run, out.Highest),
			Extensions: map[string]any{"key": key, "run": run, "token": token, "highest": out.Highest}}.Write(w)
	case InFlight, Done:
		if out.Fingerprint != "" && out.Fingerprint != c.Fingerprint {
			// In flight too: waiting for the first request would not make this one match.
			Problem{Type: TypeKeyReused, Title: "Idempotency-Key reused", Status: http.StatusUnprocessableEntity,
				Detail:     fmt.Sprintf("key %q was used with another request payload", key),
				Extensions: map[string]any{"key": key, "stored": out.Fingerprint, "fingerprint": c.Fingerprint}}.Write(w)
			return
		}
		if out.State == Done {
			replay(w, out.Answer)
			return
		}
		if m.cfg.recover != nil && m.recovered(w, r, c, out, body) {
			return
		}
		Problem{Type: TypeKeyInFlight, Title: "Idempotency-Key in flight", Status: http.StatusConflict,
			Detail:     fmt.Sprintf("a request with key %q is being processed; retry later", key),
			Extensions: map[string]any{"key": key}}.Write(w)
	case Claimed:
		m.run(w, r, next, c, body)
	default:
		m.cfg.log.ErrorContext(r.Context(), "claiming an idempotency key", logKey, c.Key, logErr, fmt.Errorf("unknown state %d", out.State))
		storeProblem(w, key)
	}
}

// run calls next under the claim c and stores its answer, or releases the claim when it
// panics or answers 5xx.
func (m *Middleware) run(w http.ResponseWriter, r *http.Request, next http.Handler, c Claim, body []byte) {
	// The claim outlives a client that hangs up: storing or releasing it must not fail
	// with the request's context.
	ctx := context.WithoutCancel(r.Context())
	released := false
	defer func() {
		if released {
			return
		}
		if err := m.store.Release(ctx, c); err != nil {
			m.cfg.log.ErrorContext(ctx, "releasing an idempotency key after a panic", logKey, c.Key, logErr, err)
		}
	}()
	r.Body = io.NopCloser(bytes.NewReader(body))
	rec := &recorder{header: http.Header{}}
	next.ServeHTTP(rec, r)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	released = true
	if rec.status >= 500 {
		if err := m.store.Release(ctx, c); err != nil {
			m.cfg.log.ErrorContext(ctx, "releasing an idempotency key", logKey, c.Key, logErr, err)
		}
	} else {
		a := Answer{Status: rec.status, Header: http.Header{}, Body: rec.body.Bytes()}
		for _, name := range m.cfg.storedHeaders {
			if v := rec.header.Values(name); len(v) > 0 {
				a.Header[http.CanonicalHeaderKey(name)] = v
			}
		}
		if err := m.store.Complete(ctx, c, a); err != nil {
			// The effect has happened: the client gets its answer, and the key stays
			// in flight until it expires.
			m.cfg.log.ErrorContext(ctx, "storing an idempotent answer", logKey, c.Key, logErr, err)
		}
	}
	h := w.Header()
	for k, v := range rec.header {
		h[k] = v
	}
	h.Set("Content-Length", strconv.Itoa(rec.body.Len()))
	w.WriteHeader(rec.status)
	w.Write(rec.body.Bytes())
}

// recovered answers a request whose key is in flight under the same fingerprint from
// the effect itself (WithRecovery): a claim whose server died between the effect and
// storing its answer is completed with the answer the effect gives, and the request gets
// it. It reports whether it answered.
func (m *Middleware) recovered(w http.ResponseWriter, r *http.Request, c Claim, out Outcome, body []byte) bool {
	r.Body = io.NopCloser(bytes.NewReader(body))
	a, found, err := m.cfg.recover(r)
	if err != nil {
		m.cfg.log.ErrorContext(r.Context(), "recovering an idempotency key in flight", logKey, c.Key, logErr, err)
		return false
	}
	if !found {
		return false
	}
	held := c
	held.ID = out.Claim
	if err := m.store.Complete(context.WithoutCancel(r.Context()), held, a); err != nil && !errors.Is(err, ErrClaimLost) {
		m.cfg.log.ErrorContext(r.Context(), "storing a recovered answer", logKey, c.Key, logErr, err)
	}
	replay(w, a)
	return true
}

func replay(w http.ResponseWriter, a Answer) {
	h := w.Header()
	for k, v := range a.Header {
		h[k] = v
	}
	h.Set(ReplayedHeader, "true")
	h.Set("Content-Length", strconv.Itoa(len(a.Body)))
	w.WriteHeader(a.Status)
	w.Write(a.Body)
}

func storeProblem(w http.ResponseWriter, key string) {
	Problem{Type: TypeStore, Title: "Idempotency store unavailable", Status: http.StatusServiceUnavailable,
		Detail: "the idempotency key could not be checked; retry later", Extensions: map[string]any{"key": key}}.Write(w)
}

// fingerprint is "sha256:<hex>" of the method, the request URI, the run header, the
// chosen headers and the body, each on a line of its own (none but the body can hold a
// newline).
func (m *Middleware) fingerprint(r *http.Request, body []byte) string {
	var b bytes.Buffer
	b.WriteString(r.Method + "\n" + r.URL.RequestURI() + "\n")
	// The run is part of the request: the same key and body under another run's headers
	// is another request, never the first run's answer.
	b.WriteString(http.CanonicalHeaderKey(m.cfg.runHeader) + ": " + strings.TrimSpace(r.Header.Get(m.cfg.runHeader)) + "\n")
	for _, name := range m.cfg.fingerprintHeaders {
		for _, v := range r.Header.Values(name) {
			b.WriteString(http.CanonicalHeaderKey(name) + ": " + v + "\n")
		}
	}
	b.WriteString("\n")
	b.Write(body)
	return idempotency.Digest(b.Bytes())
}

func claimID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// recorder holds a handler's answer until it is stored.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 && status >= 200 { // informational answers are not kept
		r.status = status
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}
