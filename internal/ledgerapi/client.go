package ledgerapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cairnhq/cairn/internal/books"
	"github.com/cairnhq/cairn/pkg/fence"
	"github.com/cairnhq/cairn/pkg/httpidem"
	"github.com/cairnhq/cairn/pkg/identity"
	"github.com/cairnhq/cairn/pkg/ratelimit"
	"github.com/cairnhq/cairn/pkg/retry"
	"github.com/cairnhq/cairn/pkg/saga"
)

// ClientConfig is how a [Client] reaches the ledger's API.
type ClientConfig struct {
	URL         string            // http://HOST:PORT of services/ledger-api (CAIRN_LEDGER_URL)
	Transport   http.RoundTripper // nil: a clone of http.DefaultTransport
	CallTimeout time.Duration     // one call's bound (default httpidem.DefaultCallTimeout)
	// Limiter is the ledger's shared limit (CAIRN_LEDGER_RPS); every call waits for its
	// slot, and a Retry-After the ledger answers holds it for every instance. Nil: none.
	Limiter *ratelimit.Limiter
	// Outage is how long a call waits for a ledger that does not answer, or answers a
	// temporary failure, trying again with backoff (100ms doubling to 5s) before it
	// returns the temporary error (default DefaultOutage; negative: no wait). The step's
	// heartbeat holds its lease meanwhile, so a ledger restarted for maintenance costs
	// the run a pause, not an attempt the loop guard counts.
	Outage time.Duration
	// Signer signs every call as the calling service (post-ledger, the compensator): the
	// ledger answers only requests signed by a key registered in cairn-keys. Now is the
	// signatures' clock (default time.Now).
	Signer *identity.Signer
	Now    func() time.Time
}

// DefaultOutage is the default of ClientConfig.Outage.
const DefaultOutage = 2 * time.Minute

// outagePolicy is the backoff of the calls tried again within ClientConfig.Outage.
var outagePolicy = retry.Policy{First: 100 * time.Millisecond, Factor: 2, Max: 5 * time.Second, Jitter: 0.1}

// Client is the ledger over HTTP: post-ledger and the compensator write through its
// [Client.Ledger] as they would through the ledger database, with the same errors.
type Client struct {
	base  string
	write *httpidem.Client
	read  *http.Client
	lim   *ratelimit.Limiter
	cfg   ClientConfig
}

// NewClient is a client of the API at c.URL.
func NewClient(c ClientConfig) (*Client, error) {
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("ledgerapi client: URL %q is not http://HOST:PORT", c.URL)
	}
	if c.Transport == nil {
		c.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = httpidem.DefaultCallTimeout
	}
	if c.Outage == 0 {
		c.Outage = DefaultOutage
	}
	if c.Signer == nil {
		return nil, errors.New("ledgerapi client: no signer: the ledger answers only signed requests")
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	base := strings.TrimRight(c.URL, "/")
	wc, err := httpidem.NewClient(httpidem.ClientConfig{Transport: c.Transport, CallTimeout: c.CallTimeout, Limiter: c.Limiter,
		Signer: c.Signer, Headers: []string{EpochHeader}, Now: c.Now})
	if err != nil {
		return nil, fmt.Errorf("ledgerapi client: %w", err)
	}
	return &Client{base: base, write: wc, lim: c.Limiter, cfg: c,
		read: &http.Client{Transport: c.Transport, Timeout: c.CallTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}, nil
}

// As is the client calling as another service, signing with s: the same address,
// transport and shared limit.
func (c *Client) As(s *identity.Signer) (*Client, error) {
	cfg := c.cfg
	cfg.Signer = s
	return NewClient(cfg)
}

// Ledger is the ledger (shadow: its shadow tables) as a books.Book.
func (c *Client) Ledger(shadow bool) *Book {
	prefix := LivePrefix
	if shadow {
		prefix = ShadowPrefix
	}
	return &Book{c: c, prefix: c.base + prefix}
}

// Book is one of the API's ledgers (live or shadow); it implements books.Book.
type Book struct {
	c      *Client
	prefix string // the base URL and /v1 or /v1/shadow
}

var _ books.Book = (*Book)(nil)

// RaiseFence raises the ledger's fence of t's run to t (POST /v1/fences).
func (b *Book) RaiseFence(ctx context.Context, t fence.Token) error {
	return b.c.outlast(ctx, func() error { return b.raise(ctx, t) })
}

func (b *Book) raise(ctx context.Context, t fence.Token) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.prefix+"/fences", http.NoBody)
	if err != nil {
		return err
	}
	setFence(req.Header, t)
	status, body, h, err := b.c.do(req, []byte{})
	if err != nil {
		return retry.Temporary(fmt.Errorf("raising the ledger's fence of %s: %w", t.RunID, err))
	}
	if status == http.StatusOK {
		return nil
	}
	return answerError(fmt.Sprintf("raising the ledger's fence of %s", t.RunID), status, body, h)
}

func setFence(h http.Header, t fence.Token) {
	h.Set(httpidem.DefaultRunHeader, t.RunID)
	h.Set(httpidem.DefaultTokenHeader, strconv.FormatUint(t.Value, 10))
	h.Set(EpochHeader, t.Epoch)
}

// Post writes e under t, as books.Ledger.Post does.
func (b *Book) Post(ctx context.Context, t fence.Token, e books.Entry) (bool, error) {
	ins, _, err := b.PostReceipt(ctx, t, e)
	return ins, err
}

// PostReceipt is Post with the receipt of the write, for its saga outcome. The body
// leaves out the key (the Idempotency-Key header is it) and created_at (the server
// stamps the row), so a retry at another time is the same payload.
func (b *Book) PostReceipt(ctx context.Context, t fence.Token, e books.Entry) (ins bool, rc saga.Receipt, err error) {
	err = b.c.outlast(ctx, func() error {
		ins, rc, err = b.post(ctx, t, e)
		return err
	})
	return ins, rc, err
}

func (b *Book) post(ctx context.Context, t fence.Token, e books.Entry) (bool, saga.Receipt, error) {
	in := fromBooks(e)
	in.Key, in.CreatedAt = "", ""
	body, err := json.Marshal(in)
	if err != nil {
		return false, saga.Receipt{}, err
	}
	if t.Epoch == "" {
		t.Epoch = DefaultEpoch
	}
	h := http.Header{"Content-Type": {"application/json"}}
	h.Set(EpochHeader, t.Epoch)
	rc, err := b.c.write.Write(ctx, httpidem.Request{URL: b.prefix + "/entries", Key: e.Key, Run: t.RunID, Token: t.Value, Body: body, Header: h})
	if err != nil {
		return false, saga.Receipt{}, writeError(e.Key, err)
	}
	out := saga.Receipt{Status: rc.Status, Reference: rc.Reference, AnswerDigest: rc.AnswerDigest, Replayed: rc.Replayed}
	return rc.Status == http.StatusCreated && !rc.Replayed, out, nil
}

// refusals are the ledger's errors a 422 names in its ledger_error member.
var refusals = []error{books.ErrNotNegation, books.ErrAlreadyReversed, books.ErrNoOriginal, books.ErrConflict, books.ErrInvalid, fence.ErrInvalidToken}

// writeError is a failed write as the ledger database would have failed it: a foreign
// epoch is fence.ErrForeignEpoch (not a key in flight), a refusal of the ledger's rules
// its books error; the rest keep the classes of httpidem.Error.
func writeError(key string, err error) error {
	var e *httpidem.Error
	if !errors.As(err, &e) || e.Problem == nil {
		return err
	}
	if mark := problemMark(e.Problem); mark != nil {
		return fmt.Errorf("writing ledger entry %s: %w: %s", key, mark, e.Problem.Detail)
	}
	return err
}

// problemMark is the error a problem of this service stands for, nil for one it
// does not name.
func problemMark(p *httpidem.Problem) error {
	switch p.Type {
	case TypeForeignEpoch:
		return fence.ErrForeignEpoch
	case httpidem.TypeFenced:
		return fence.ErrFenced
	case TypeRefused:
		named, _ := p.Extensions["ledger_error"].(string)
		for _, r := range refusals {
			if named == r.Error() {
				return r
			}
		}
		return books.ErrInvalid
	}
	return nil
}

// Get is the entry under key (GET /v1/entries/{key}).
func (b *Book) Get(ctx context.Context, key string) (e books.Entry, found bool, err error) {
	err = b.c.outlast(ctx, func() error {
		e, found, err = b.get(ctx, key)
		return err
	})
	return e, found, err
}

func (b *Book) get(ctx context.Context, key string) (books.Entry, bool, error) {
	what := "reading ledger entry " + key
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.prefix+"/entries/"+url.PathEscape(key), nil)
	if err != nil {
		return books.Entry{}, false, err
	}
	status, body, h, err := b.c.do(req, nil)
	switch {
	case err != nil:
		return books.Entry{}, false, retry.Temporary(fmt.Errorf("%s: %w", what, err))
	case status == http.StatusNotFound && isProblem(h):
		return books.Entry{}, false, nil
	case status != http.StatusOK:
		return books.Entry{}, false, answerError(what, status, body, h)
	}
	var e entry
	if err := json.Unmarshal(body, &e); err != nil {
		return books.Entry{}, false, fmt.Errorf("%s: the answer is not an entry: %w", what, err)
	}
	return e.books(), true, nil
}

// ListRun is every entry of the run, in key order (GET /v1/entries?run_id=RUN).
func (b *Book) ListRun(ctx context.Context, runID string) (es []books.Entry, err error) {
	err = b.c.outlast(ctx, func() error {
		es, err = b.list(ctx, runID)
		return err
	})
	return es, err
}

func (b *Book) list(ctx context.Context, runID string) ([]books.Entry, error) {
	what := "listing the ledger entries of run " + runID
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.prefix+"/entries?run_id="+url.QueryEscape(runID), nil)
	if err != nil {
		return nil, err
	}
	status, body, h, err := b.c.do(req, nil)
	switch {
	case err != nil:
		return nil, retry.Temporary(fmt.Errorf("%s: %w", what, err))
	case status != http.StatusOK:
		return nil, answerError(what, status, body, h)
	}
	var l entryList
	if err := json.Unmarshal(body, &l); err != nil {
		return nil, fmt.Errorf("%s: the answer is not a list of entries: %w", what, err)
	}
	out := make([]books.Entry, len(l.Entries))
	for i, e := range l.Entries {
		out[i] = e.books()
	}
	return out, nil
}

// Reversal is the reversal of the entry under key, made from the row the ledger answers.
func (b *Book) Reversal(ctx context.Context, key, createdAt string) (books.Entry, error) {
	e, found, err := b.Get(ctx, key)
	if err != nil {
		return books.Entry{}, err
	}
	if !found {
		return books.Entry{}, fmt.Errorf("reversed key %q: %w", key, books.ErrNoOriginal)
	}
	return books.ReversalOf(e, createdAt)
}

// outlast calls fn until it returns anything but a temporary error, or the outage budget
// from the first failure is spent (outagePolicy within ClientConfig.Outage).
func (c *Client) outlast(ctx context.Context, fn func() error) error {
	if c.cfg.Outage < 0 {
		return fn()
	}
	p := outagePolicy
	p.Within = c.cfg.Outage
	return p.Do(ctx, func(err error) bool { return retry.IsTemporary(err) && !errors.Is(err, fence.ErrFenced) },
		func(int) error { return fn() })
}

// maxAnswer bounds the answer read: a run's list of entries included.
const maxAnswer = 256 << 20

// do makes one call that is not a keyed write, through the limiter, signed (body, when
// not nil, is the request's, whose digest the signature covers).
func (c *Client) do(req *http.Request, sent []byte) (int, []byte, http.Header, error) {
	if c.lim != nil {
		if _, err := c.lim.Wait(req.Context()); err != nil {
			return 0, nil, nil, fmt.Errorf("waiting for the ledger's rate limit: %w", err)
		}
	}
	httpidem.Sign(req, sent, c.cfg.Signer, c.cfg.Now(), EpochHeader)
	resp, err := c.read.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("reading the answer: %w", err)
	}
	return resp.StatusCode, body, resp.Header, nil
}

func isProblem(h http.Header) bool {
	return strings.HasPrefix(h.Get("Content-Type"), httpidem.ContentTypeProblem)
}

// answerError is an answer of a read or a fence raise that is not its success: a 429 or
// 5xx is temporary, a problem this service names is its error, the rest an error naming
// the status and the problem's detail.
func answerError(what string, status int, body []byte, h http.Header) error {
	var p httpidem.Problem
	if isProblem(h) {
		_ = json.Unmarshal(body, &p)
	}
	detail := p.Detail
	if detail == "" {
		detail = string(bytes.TrimSpace(body[:min(len(body), 512)]))
	}
	err := fmt.Errorf("%s: the ledger answered %d: %s", what, status, detail)
	if mark := problemMark(&p); mark != nil {
		return fmt.Errorf("%w: %w", err, mark)
	}
	if status == http.StatusTooManyRequests || status >= 500 {
		return retry.Temporary(err)
	}
	return err
}
