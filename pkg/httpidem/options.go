package httpidem

import (
	"log/slog"
	"net/http"
	"time"
)

// Option sets how a [Middleware] behaves.
type Option func(*config)

type config struct {
	expiry             time.Duration
	now                func() time.Time
	methods            map[string]bool
	required           bool
	runHeader          string
	tokenHeader        string
	storedHeaders      []string
	fingerprintHeaders []string
	maxBody            int64
	log                *slog.Logger
	scope              func(*http.Request) string
	selfFenced         bool
	recover            func(*http.Request) (Answer, bool, error)
}

// Defaults of the options.
const (
	DefaultExpiry      = 24 * time.Hour
	DefaultRunHeader   = "Cairn-Run"
	DefaultTokenHeader = "Cairn-Fence-Token"
	DefaultMaxBody     = 1 << 20
	KeyHeader          = "Idempotency-Key"
	ReplayedHeader     = "Idempotent-Replayed"
)

func defaults() config {
	return config{
		expiry:        DefaultExpiry,
		now:           time.Now,
		methods:       map[string]bool{http.MethodPost: true, http.MethodPatch: true},
		runHeader:     DefaultRunHeader,
		tokenHeader:   DefaultTokenHeader,
		storedHeaders: []string{"Content-Type", "Content-Language", "Location", "ETag", "Last-Modified"},
		maxBody:       DefaultMaxBody,
		log:           slog.New(slog.DiscardHandler),
	}
}

// WithExpiry sets how long a key holds its answer (default 24h). A key past its window
// counts as absent: the next request with it runs the handler again.
func WithExpiry(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.expiry = d
		}
	}
}

// WithClock sets the clock the expiry is measured by (default time.Now).
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		if now != nil {
			c.now = now
		}
	}
}

// WithMethods sets the methods made idempotent (default POST and PATCH); requests with
// other methods pass through untouched.
func WithMethods(methods ...string) Option {
	return func(c *config) {
		c.methods = make(map[string]bool, len(methods))
		for _, m := range methods {
			c.methods[m] = true
		}
	}
}

// WithKeyRequired refuses a request without an Idempotency-Key with 400, as the draft
// lets a resource do. Without it such a request passes through untouched.
func WithKeyRequired() Option { return func(c *config) { c.required = true } }

// WithFenceHeaders names the headers that carry the run id and its fencing token
// (default Cairn-Run and Cairn-Fence-Token).
func WithFenceHeaders(run, token string) Option {
	return func(c *config) {
		if run != "" && token != "" {
			c.runHeader, c.tokenHeader = run, token
		}
	}
}

// WithStoredHeaders sets which response headers are stored and replayed (default
// Content-Type, Content-Language, Location, ETag and Last-Modified).
func WithStoredHeaders(names ...string) Option {
	return func(c *config) { c.storedHeaders = names }
}

// WithFingerprintHeaders adds request headers to the fingerprint, so that a repeat with
// another value of one of them is a changed payload (e.g. Content-Type, or a tenant).
func WithFingerprintHeaders(names ...string) Option {
	return func(c *config) { c.fingerprintHeaders = names }
}

// WithMaxBody sets the largest request body read, in bytes (default 1 MiB); a larger
// one is refused with 413 before any claim.
func WithMaxBody(n int64) Option {
	return func(c *config) {
		if n > 0 {
			c.maxBody = n
		}
	}
}

// WithLogger sets where the middleware reports store errors it cannot answer with.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.log = l
		}
	}
}

// WithScope gives each client a key space of its own: scope names the client of a
// request (an account, a tenant, the authenticated subject), and the same key from two
// clients is two keys. Without it all clients share one key space. The scope must not
// hold a newline.
func WithScope(scope func(*http.Request) string) Option {
	return func(c *config) { c.scope = scope }
}

// WithoutFence leaves the run's fence to the handler: for a service whose own fence
// holds more than a token (one that holds the epoch of the NATS storage too, which
// `cairn fences adopt` moves). The fencing headers are still checked and the run is
// still part of the fingerprint; no http_fence_tokens row is kept or compared.
func WithoutFence() Option { return func(c *config) { c.selfFenced = true } }

// WithRecovery lets a request whose key is in flight, under the same fingerprint, be
// answered from the effect itself: fn reads the effect the request stands for (the
// system's row under the key) and returns the answer the handler would have given, and
// found false when there is none yet. A found answer completes the key's claim (a claim
// whose server died between the effect and storing its answer, which would otherwise stay
// in flight for the whole window) and is replayed. fn must not write.
func WithRecovery(fn func(r *http.Request) (a Answer, found bool, err error)) Option {
	return func(c *config) { c.recover = fn }
}
