package httpidem

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cairnhq/cairn/pkg/idempotency"
	"github.com/cairnhq/cairn/pkg/identity"
	"github.com/cairnhq/cairn/pkg/ratelimit"
)

// DigestHeader carries the payload's fingerprint on a write (RFC 9530 Content-Digest,
// sha-256). The server's own fingerprint covers more (method, path, body); this one lets
// any proxy or log tell two payloads apart.
const DigestHeader = "Content-Digest"

// Defaults of a [ClientConfig].
const (
	DefaultCallTimeout     = 30 * time.Second
	DefaultMaxRetryAfter   = time.Minute
	DefaultRetryAfterTries = 3
	DefaultReferenceHeader = "Location"
	DefaultReferenceField  = "id"
)

// ClientConfig is how a [Client] talks to one outside system.
type ClientConfig struct {
	// Transport makes the calls (nil: a clone of http.DefaultTransport). Redirects are
	// never followed: a 3xx is a rejection.
	Transport http.RoundTripper
	// CallTimeout bounds one call, from the moment the limiter grants it to the end of
	// the answer's body (default 30s).
	CallTimeout time.Duration
	// Limiter is the system's shared limit (nil: none): every call, lookups included,
	// waits for its slot. A Retry-After a write waits is held in it (Limiter.Hold), so
	// that every instance sharing the limit waits it out, not only this one; a hold that
	// fails (the bucket out of reach for the limiter's Unavailable) is waited on After.
	Limiter *ratelimit.Limiter
	// MaxRetryAfter is the longest Retry-After a write waits (default 1 min); a longer
	// one returns ErrRateLimited with the wait, for the caller to delay the item.
	MaxRetryAfter time.Duration
	// RetryAfterTries is how many 429/503 answers with Retry-After a write waits out
	// before it returns ErrRateLimited (default 3).
	RetryAfterTries int
	// After is the timer a Retry-After is waited with when there is no Limiter, or the
	// Limiter did not hold it (default time.After); tests pass one that records the wait.
	After func(time.Duration) <-chan time.Time
	// ReferenceHeader names the answer header that holds the provider's reference id
	// (default Location); when it is absent, ReferenceField of a JSON object body is
	// used (default "id", a string or a number).
	ReferenceHeader string
	ReferenceField  string
	// LookupURL, when the API offers a GET of a key, is its URL for key: a lost answer is
	// settled by that GET. Nil: by the same request again, which the middleware answers
	// from its store.
	LookupURL func(key string) string
	// RunHeader and TokenHeader name the fencing headers (default Cairn-Run and
	// Cairn-Fence-Token).
	RunHeader, TokenHeader string
	// OnIntent is called before a write is first sent (its intent, for the saga); an
	// error stops the write unsent. OnReceipt is called with the receipt of a write that
	// is done; an error is returned with the receipt. Nil: not called.
	OnIntent  func(ctx context.Context, r Request, fingerprint string) error
	OnReceipt func(ctx context.Context, r Request, rc Receipt) error
	// Signer, when set, signs every call as its service (see [Sign]), covering the
	// SignedHeaders and Headers; Now is the clock of the signatures (default time.Now).
	Signer  *identity.Signer
	Headers []string
	Now     func() time.Time
}

func (c ClientConfig) withDefaults() ClientConfig {
	if c.Transport == nil {
		c.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	c.CallTimeout = cmpOr(c.CallTimeout, DefaultCallTimeout)
	c.MaxRetryAfter = cmpOr(c.MaxRetryAfter, DefaultMaxRetryAfter)
	c.RetryAfterTries = cmpOr(c.RetryAfterTries, DefaultRetryAfterTries)
	if c.After == nil {
		c.After = time.After
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	c.ReferenceHeader = cmpOr(c.ReferenceHeader, DefaultReferenceHeader)
	c.ReferenceField = cmpOr(c.ReferenceField, DefaultReferenceField)
	c.RunHeader = cmpOr(c.RunHeader, DefaultRunHeader)
	c.TokenHeader = cmpOr(c.TokenHeader, DefaultTokenHeader)
	return c
}

func cmpOr[T comparable](v, d T) T {
	var zero T
	if v == zero {
		return d
	}
	return v
}

func (c ClientConfig) validate() error {
	switch {
	case c.CallTimeout < 0:
		return errors.New("the call timeout is negative")
	case c.MaxRetryAfter < 0:
		return errors.New("the longest Retry-After is negative")
	case c.RetryAfterTries < 0:
		return errors.New("the Retry-After tries are negative")
	}
	return nil
}

// Client writes to one outside system's HTTP API, each write keyed and fenced: see the
// package doc, "The client side".
type Client struct {
	http *http.Client
	cfg  ClientConfig
}

// NewClient is a client configured by c.
func NewClient(c ClientConfig) (*Client, error) {
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("httpidem client: %w", err)
	}
	c = c.withDefaults()
	hc := &http.Client{Transport: c.Transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &Client{http: hc, cfg: c}, nil
}

// Request is one keyed write.
type Request struct {
	Method string // default POST
	URL    string
	Key    string // the effect's key, sent as Idempotency-Key
	Run    string // the run id; "" sends no fencing headers
	Token  uint64 // the run's fencing token (at most 2^63-1)
	Body   []byte
	Header http.Header // further headers (Content-Type...)
}

// Receipt is what a write that is done leaves: the answer's status, the provider's
// reference id (see [ClientConfig.ReferenceHeader]), "sha256:<hex>" digests of the
// answer's body and of the request's, and whether the server replayed a stored answer.
type Receipt struct {
	Status       int
	Reference    string
	AnswerDigest string
	Fingerprint  string
	Replayed     bool
}

// Write sends r and classes its answer (see [Error]): nil with the receipt for a 2xx,
// otherwise an *Error. A 429 or 503 with a Retry-After up to MaxRetryAfter is waited out
// (held in the Limiter for every instance, else on the After timer) and the write sent
// again with the same key, up to RetryAfterTries times. An answer lost after the request
// was sent is settled by a lookup before Write returns.
func (c *Client) Write(ctx context.Context, r Request) (Receipt, error) {
	r.Method = cmpOr(r.Method, http.MethodPost)
	if _, err := FormatKey(r.Key); err != nil {
		return Receipt{}, fmt.Errorf("writing %s: %w", r.URL, err)
	}
	if r.Token > math.MaxInt64 {
		return Receipt{}, fmt.Errorf("writing %s: token %d beyond 63 bits: %w", r.URL, r.Token, ErrInvalidFence)
	}
	fp := idempotency.Digest(r.Body)
	if c.cfg.OnIntent != nil {
		if err := c.cfg.OnIntent(ctx, r, fp); err != nil {
			return Receipt{}, fmt.Errorf("recording the intent of %s: %w", r.Key, err)
		}
	}
	for try := 1; ; try++ {
		rc, err := c.writeOnce(ctx, r, fp)
		var e *Error
		if errors.As(err, &e) && e.Class == ErrRateLimited && e.Wait > 0 && e.Wait <= c.cfg.MaxRetryAfter && try < c.cfg.RetryAfterTries+1 {
			// Held in the shared limit, the wait is every instance's: the next call's
			// Limiter.Wait waits it out, with the calls of the others. A hold refused (longer
			// than ratelimit.MaxHold) or failed is this write's own wait.
			if c.cfg.Limiter != nil && c.cfg.Limiter.Hold(ctx, e.Wait) == nil {
				continue
			}
			select {
			case <-c.cfg.After(e.Wait):
				continue
			case <-ctx.Done():
				return Receipt{}, fmt.Errorf("waiting %s as told: %w", e.Wait, context.Cause(ctx))
			}
		}
		if err != nil {
			return Receipt{}, err
		}
		if c.cfg.OnReceipt != nil {
			if err := c.cfg.OnReceipt(ctx, r, rc); err != nil {
				return rc, fmt.Errorf("recording the receipt of %s: %w", r.Key, err)
			}
		}
		return rc, nil
	}
}

// writeOnce sends r once and, when its answer is lost, looks it up.
func (c *Client) writeOnce(ctx context.Context, r Request, fp string) (Receipt, error) {
	ans, sent, err := c.call(ctx, r.Method, r.URL, r, true)
	if err == nil {
		return c.classify(r, fp, ans)
	}
	if ctx.Err() != nil {
		return Receipt{}, &Error{Class: ErrTemporary, Key: r.Key, Err: context.Cause(ctx)}
	}
	if !sent {
		return Receipt{}, &Error{Class: ErrTemporary, Key: r.Key, Err: err}
	}
	// The request went out and no answer came: the write may have landed. Its outcome
	// is the lookup's.
	method, url, withBody := r.Method, r.URL, true
	if c.cfg.LookupURL != nil {
		method, url, withBody = http.MethodGet, c.cfg.LookupURL(r.Key), false
	}
	ans, _, lerr := c.call(ctx, method, url, r, withBody)
	if lerr != nil {
		if ctx.Err() != nil {
			lerr = context.Cause(ctx)
		}
		return Receipt{}, &Error{Class: ErrTemporary, Key: r.Key,
			Err: fmt.Errorf("answer lost (%w), and its lookup too: %w", err, lerr)}
	}
	if !withBody && ans.status == http.StatusNotFound {
		// The key is unknown: the write did not land, and the next try makes it.
		return Receipt{}, &Error{Class: ErrTemporary, Key: r.Key, Status: ans.status,
			Err: fmt.Errorf("answer lost (%w), and the lookup found no key", err)}
	}
	rc, cerr := c.classify(r, fp, ans)
	if cerr == nil && !withBody {
		rc.Replayed = true // a GET of the key answers from the provider's store
	}
	return rc, cerr
}

// answer is a response read in full.
type answer struct {
	status int
	header http.Header
	digest string
	head   []byte // the first maxHead bytes of the body, for problems and ids
}

const maxHead = 64 << 10

// call makes one call, through the limiter and under the call timeout; sent says
// whether the request was written before the error.
func (c *Client) call(ctx context.Context, method, url string, r Request, withBody bool) (answer, bool, error) {
	if c.cfg.Limiter != nil {
		if _, err := c.cfg.Limiter.Wait(ctx); err != nil {
			return answer{}, false, fmt.Errorf("waiting for the rate limit: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	var body io.Reader
	if withBody {
		body = bytes.NewReader(r.Body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return answer{}, false, fmt.Errorf("%s %s: %w", method, url, err)
	}
	for k, v := range r.Header {
		req.Header[k] = v
	}
	key, _ := FormatKey(r.Key) // checked by Write
	req.Header.Set(KeyHeader, key)
	if r.Run != "" {
		req.Header.Set(c.cfg.RunHeader, r.Run)
		req.Header.Set(c.cfg.TokenHeader, strconv.FormatUint(r.Token, 10))
	}
	var signed []byte // nil: no body, no digest
	if withBody {
		signed = r.Body
		if signed == nil {
			signed = []byte{}
		}
		req.Header.Set(DigestHeader, ContentDigest(signed))
	}
	if c.cfg.Signer != nil {
		Sign(req, signed, c.cfg.Signer, c.cfg.Now(), c.cfg.Headers...)
	}
	var sent atomic.Bool // set by the transport's goroutine
	req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err == nil {
				sent.Store(true)
			}
		},
	}))
	resp, err := c.http.Do(req)
	if err != nil {
		return answer{}, sent.Load(), fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	h := sha256.New()
	var head bytes.Buffer
	if _, err := io.Copy(io.MultiWriter(h, &limitWriter{&head, maxHead}), resp.Body); err != nil {
		return answer{}, true, fmt.Errorf("%s %s: reading the answer: %w", method, url, err)
	}
	return answer{status: resp.StatusCode, header: resp.Header,
		digest: "sha256:" + fmt.Sprintf("%x", h.Sum(nil)), head: head.Bytes()}, true, nil
}

type limitWriter struct {
	b *bytes.Buffer
	n int
}

func (w *limitWriter) Write(p []byte) (int, error) {
	if room := w.n - w.b.Len(); room > 0 {
		w.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// classify turns an answer into a receipt or a classed error.
func (c *Client) classify(r Request, fp string, a answer) (Receipt, error) {
	if a.status >= 200 && a.status < 300 {
		return Receipt{Status: a.status, Reference: c.reference(a), AnswerDigest: a.digest, Fingerprint: fp,
			Replayed: a.header.Get(ReplayedHeader) == "true"}, nil
	}
	p := problemOf(a)
	e := &Error{Key: r.Key, Status: a.status, Problem: p}
	switch {
	case a.status == http.StatusConflict && p.Type == TypeFenced:
		e.Class = ErrFenced
	case a.status == http.StatusConflict:
		e.Class = ErrInFlight
	case a.status == http.StatusUnprocessableEntity:
		e.Class = ErrKeyConflict
		stored, _ := p.Extensions["stored"].(string)
		e.Err = idempotency.Conflict(r.Key, stored, fp)
	case a.status == http.StatusTooManyRequests || a.status == http.StatusServiceUnavailable:
		wait, ok := retryAfter(a.header.Get("Retry-After"))
		e.Class, e.Wait = ErrRateLimited, wait
		if !ok && a.status == http.StatusServiceUnavailable {
			e.Class = ErrTemporary
		}
	case a.status >= 500:
		e.Class = ErrTemporary
	default: // other 4xx, and 3xx: redirects are not followed
		e.Class = ErrRejected
	}
	return Receipt{}, e
}

// retryAfter reads a Retry-After value: delay-seconds or an HTTP date.
func retryAfter(v string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0), true
	}
	return 0, false
}

// problemOf is the answer's problem details, or one made of its status and body.
func problemOf(a answer) *Problem {
	var p Problem
	ct := a.header.Get("Content-Type")
	if strings.HasPrefix(ct, ContentTypeProblem) || strings.HasPrefix(ct, "application/json") {
		if json.Unmarshal(a.head, &p) == nil && (p.Type != "" || p.Title != "" || p.Status != 0) {
			return &p
		}
	}
	detail := string(a.head[:min(len(a.head), 512)])
	if loc := a.header.Get("Location"); a.status >= 300 && a.status < 400 {
		detail = "redirect to " + loc + " not followed"
	}
	return &Problem{Title: http.StatusText(a.status), Status: a.status, Detail: detail}
}

// reference is the provider's id for the write: the reference header, else the
// reference field of a JSON object body.
func (c *Client) reference(a answer) string {
	if v := a.header.Get(c.cfg.ReferenceHeader); v != "" {
		return v
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(a.head, &m) != nil {
		return ""
	}
	raw, ok := m[c.cfg.ReferenceField]
	if !ok {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return n.String()
	}
	return ""
}
