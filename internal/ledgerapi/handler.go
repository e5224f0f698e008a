package ledgerapi

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"time"

	"github.com/cairnhq/cairn/internal/books"
	"github.com/cairnhq/cairn/pkg/fence"
	"github.com/cairnhq/cairn/pkg/httpidem"
	"github.com/cairnhq/cairn/pkg/identity"
)

// Config is what a [Handler] serves.
type Config struct {
	DB     *books.DB     // the ledger's database; the middleware's tables are in it too
	Expiry time.Duration // how long a key holds its answer (default httpidem.DefaultExpiry)
	Logger *slog.Logger
	Now    func() time.Time // created_at of an entry that has none, and the clock of signatures (default time.Now)
	// Ring holds the keys the callers sign with (cairn-keys): every request is signed by
	// its service (package doc, "Callers").
	Ring *identity.Ring
	// Skew is how far a request's signing time may be from Now (default
	// httpidem.DefaultSkew); MaxBody the largest body read (default httpidem.DefaultMaxBody).
	Skew    time.Duration
	MaxBody int64
	// Roles says which service may do what (default DefaultRoles).
	Roles *Roles
}

// Roles names the services allowed each kind of request.
type Roles struct {
	Post    []string // may post any entry, and raise a run's fence (POST /v1/fences)
	Reverse []string // may post reversals only, and raise a run's fence
	Read    []string // may read entries (GET /v1/entries/{key}, GET /v1/entries?run_id=RUN)
}

// The services that call the ledger in the reference night.
const (
	CallerPostLedger  = "post-ledger"
	CallerCompensator = "compensator"
)

// DefaultRoles: post-ledger posts (and reads back what it wrote, lists a rerun's rows and
// counts its progress), the compensator reverses (and reads the row it reverses), nobody
// else calls.
func DefaultRoles() *Roles {
	return &Roles{Post: []string{CallerPostLedger}, Reverse: []string{CallerCompensator},
		Read: []string{CallerPostLedger, CallerCompensator}}
}

func (c Config) validate() error {
	switch {
	case c.DB == nil:
		return errors.New("ledgerapi: no database")
	case c.Ring == nil:
		return errors.New("ledgerapi: no ring of keys to check the callers with")
	case c.Expiry < 0:
		return fmt.Errorf("ledgerapi: a negative expiry %s", c.Expiry)
	}
	return nil
}

// hooks run in each POST at the named points (tests: a fence raised during the write, a
// crash between the write and storing its answer).
type hooks struct {
	BeforeWrite func(context.Context)
	AfterWrite  func(context.Context)
}

// Handler serves the ledger's API; see the package doc.
func Handler(c Config) (http.Handler, error) { return handler(c, hooks{}) }

func handler(c Config, hk hooks) (http.Handler, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Roles == nil {
		c.Roles = DefaultRoles()
	}
	c.MaxBody = cmp.Or(c.MaxBody, httpidem.DefaultMaxBody)
	auth, err := httpidem.Authenticate(httpidem.AuthConfig{Ring: c.Ring, Now: c.Now, Skew: c.Skew, MaxBody: c.MaxBody,
		Headers: []string{EpochHeader}, Logger: c.Logger})
	if err != nil {
		return nil, fmt.Errorf("ledgerapi: %w", err)
	}
	writers := slices.Concat(c.Roles.Post, c.Roles.Reverse)
	guard := func(callers []string, h http.Handler) http.Handler { return auth(httpidem.Allow(callers...)(h)) }
	mux := http.NewServeMux()
	for _, shadow := range []bool{false, true} {
		s := &server{ledger: c.DB.Ledger(shadow), fences: "fences", db: c.DB, log: c.Logger, now: c.Now, roles: c.Roles, hooks: hk}
		// The ledger's own fence (with its epoch) holds the run: the middleware keeps none.
		opts := []httpidem.Option{httpidem.WithExpiry(c.Expiry), httpidem.WithKeyRequired(),
			httpidem.WithLogger(c.Logger), httpidem.WithClock(c.Now), httpidem.WithMaxBody(c.MaxBody),
			httpidem.WithoutFence(), httpidem.WithRecovery(s.recover)}
		prefix := LivePrefix
		if shadow {
			// The shadow's keys are a space of their own: a shadow run may write the
			// key a live run wrote, and neither's answer is the other's.
			s.fences, prefix = "shadow_fences", ShadowPrefix
			opts = append(opts, httpidem.WithScope(func(*http.Request) string { return "shadow" }))
		}
		mw := httpidem.New(Store(c.DB), opts...)
		mux.Handle("POST "+prefix+"/entries", guard(writers, s.authorized(s.fenced(mw.Wrap(http.HandlerFunc(s.post))))))
		mux.Handle("GET "+prefix+"/entries/{key...}", guard(c.Roles.Read, http.HandlerFunc(s.get)))
		mux.Handle("GET "+prefix+"/entries", guard(c.Roles.Read, http.HandlerFunc(s.list)))
		mux.Handle("POST "+prefix+"/fences", guard(writers, http.HandlerFunc(s.raise)))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpidem.Problem{Type: TypeNotFound, Title: "Not found", Status: http.StatusNotFound,
			Detail: fmt.Sprintf("no resource %s %s: this service serves POST /v1/entries, GET /v1/entries/{key}, GET /v1/entries?run_id=RUN and POST /v1/fences, and the same under /v1/shadow", r.Method, r.URL.Path)}.Write(w)
	})
	return mux, nil
}

// The paths of the live ledger and of its shadow tables (a shadow run's).
const (
	LivePrefix   = "/v1"
	ShadowPrefix = "/v1/shadow"
)

type server struct {
	ledger *books.Ledger
	fences string // the ledger's fence table
	db     *books.DB
	log    *slog.Logger
	now    func() time.Time

	roles *Roles
	hooks hooks
}

// entry is a ledger_entries row as JSON, its members the table's columns.
type entry struct {
	Key         string  `json:"key,omitempty"`
	RunID       string  `json:"run_id"`
	InvoiceNo   string  `json:"invoice_no"`
	Line        int     `json:"line"`
	Kind        string  `json:"kind"`
	SupplierID  string  `json:"supplier_id"`
	AmountPaise int64   `json:"amount_paise"`
	Reverses    *string `json:"reverses"` // null for an entry that reverses nothing
	CreatedAt   string  `json:"created_at,omitempty"`
}

func fromBooks(e books.Entry) entry {
	out := entry{Key: e.Key, RunID: e.RunID, InvoiceNo: e.InvoiceNo, Line: e.Line, Kind: e.Kind,
		SupplierID: e.SupplierID, AmountPaise: e.AmountPaise, CreatedAt: e.CreatedAt}
	if e.Reverses != "" {
		out.Reverses = &e.Reverses
	}
	return out
}

func (e entry) books() books.Entry {
	out := books.Entry{Key: e.Key, RunID: e.RunID, InvoiceNo: e.InvoiceNo, Line: e.Line, Kind: e.Kind,
		SupplierID: e.SupplierID, AmountPaise: e.AmountPaise, CreatedAt: e.CreatedAt}
	if e.Reverses != nil {
		out.Reverses = *e.Reverses
	}
	return out
}

// Log attribute keys.
const (
	logKey = "key"
	logRun = "run_id"
	logErr = "err"
)

// fenced raises the ledger's fence of the request's run to its token before next (the
// middleware) looks at the key: a stale token is refused here, with nothing claimed.
func (s *server) fenced(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, ok := s.token(w, r)
		if !ok {
			return
		}
		if err := s.ledger.RaiseFence(r.Context(), t); err != nil {
			key, _ := httpidem.ParseKey(r.Header.Get(httpidem.KeyHeader))
			s.fenceProblem(r.Context(), w, t, key, err, false)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// authorized lets a caller of the Reverse role post only reversals (403 otherwise), and
// refuses an entry of another run than its fencing headers with 422; both before the
// fence is raised or the key looked at, so that nothing changes.
func (s *server) authorized(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body) // read in full and checked by Authenticate
		if err != nil {
			badEntry(w, "", "the body could not be read: "+err.Error())
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		var in entry
		parsed := json.Unmarshal(body, &in) == nil
		caller := httpidem.CallerOf(r.Context())
		if !slices.Contains(s.roles.Post, caller) && (!parsed || in.Reverses == nil) {
			key, _ := httpidem.ParseKey(r.Header.Get(httpidem.KeyHeader))
			httpidem.Forbid(w, caller, fmt.Sprintf("service %s may post only reversals (an entry whose reverses names the row), and %q is none", caller, key))
			return
		}
		run, _, sent, err := httpidem.ParseFence(r.Header.Get(httpidem.DefaultRunHeader), r.Header.Get(httpidem.DefaultTokenHeader))
		if parsed && err == nil && sent && in.RunID != run {
			key, _ := httpidem.ParseKey(r.Header.Get(httpidem.KeyHeader))
			refused(w, key, fmt.Sprintf("an entry of run %q under the fencing token of run %q", in.RunID, run), books.ErrInvalid)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// recover is the middleware's recovery of a key in flight (httpidem.WithRecovery): the
// ledger's row under the key, when it holds the request's entry, is the answer the write
// would have stored; a server that died between the write and storing its answer leaves
// no key in flight for its window.
func (s *server) recover(r *http.Request) (httpidem.Answer, bool, error) {
	key, err := httpidem.ParseKey(r.Header.Get(httpidem.KeyHeader))
	if err != nil {
		return httpidem.Answer{}, false, nil
	}
	var in entry
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		return httpidem.Answer{}, false, nil
	}
	row, found, err := s.ledger.Get(r.Context(), key)
	if err != nil || !found {
		return httpidem.Answer{}, false, err
	}
	in.Key = key
	posted := in.books()
	if posted.CreatedAt == "" {
		posted.CreatedAt = row.CreatedAt // the server stamped it
	}
	if posted != row {
		return httpidem.Answer{}, false, nil // another payload: the handler's answer, not the row's
	}
	h := http.Header{"Content-Type": {"application/json"}, "Location": {path.Dir(r.URL.Path) + "/entries/" + url.PathEscape(key)}}
	return httpidem.Answer{Status: http.StatusCreated, Header: h, Body: jsonBody(fromBooks(row))}, true, nil
}

// token is the request's fencing token as the ledger's fence.Token; it answers the
// request itself when the headers are missing or malformed.
func (s *server) token(w http.ResponseWriter, r *http.Request) (fence.Token, bool) {
	runH, tokenH := httpidem.DefaultRunHeader, httpidem.DefaultTokenHeader
	run, value, sent, err := httpidem.ParseFence(r.Header.Get(runH), r.Header.Get(tokenH))
	switch {
	case err != nil:
		httpidem.Problem{Type: httpidem.TypeFenceInvalid, Title: "Fencing headers invalid", Status: http.StatusBadRequest,
			Detail: runH + ", " + tokenH + ": " + err.Error()}.Write(w)
		return fence.Token{}, false
	case !sent:
		httpidem.Problem{Type: TypeFenceMissing, Title: "Fencing token missing", Status: http.StatusPreconditionRequired,
			Detail: "a ledger entry is written under its run's fencing token: send " + runH + " and " + tokenH}.Write(w)
		return fence.Token{}, false
	case value < 0:
		httpidem.Problem{Type: httpidem.TypeFenceInvalid, Title: "Fencing headers invalid", Status: http.StatusBadRequest,
			Detail: fmt.Sprintf("%s: a negative token %d", tokenH, value)}.Write(w)
		return fence.Token{}, false
	}
	epoch := r.Header.Get(EpochHeader)
	if epoch == "" {
		epoch = DefaultEpoch
	}
	return fence.Token{RunID: run, Epoch: epoch, Value: uint64(value)}, true
}

// fenceProblem answers err, an error of the ledger's fence check for t. Found in the
// write's transaction (inWrite), a refusal is 503 so that the middleware releases the key
// (package doc, "Fencing").
func (s *server) fenceProblem(ctx context.Context, w http.ResponseWriter, t fence.Token, key string, err error, inWrite bool) {
	fenced, foreign := errors.Is(err, fence.ErrFenced), errors.Is(err, fence.ErrForeignEpoch)
	if !fenced && !foreign {
		s.unavailable(ctx, w, "the ledger's fence could not be checked", err, t.RunID)
		return
	}
	epoch, highest, rerr := s.fenceOf(ctx, t.RunID)
	if rerr != nil {
		s.unavailable(ctx, w, "the ledger's fence could not be read", rerr, t.RunID)
		return
	}
	ext := map[string]any{"run": t.RunID, "token": t.Value, "highest": highest, "epoch": t.Epoch, "fence_epoch": epoch}
	if key != "" {
		ext["key"] = key
	}
	p := httpidem.Problem{Type: httpidem.TypeFenced, Title: "Fenced", Status: http.StatusConflict,
		Detail: fmt.Sprintf("fencing token %d of run %q is below the token the ledger holds for it, %d", t.Value, t.RunID, highest), Extensions: ext}
	if foreign {
		p.Type, p.Title = TypeForeignEpoch, "Foreign epoch"
		p.Detail = fmt.Sprintf("the ledger's fence of run %q holds epoch %q (token %d), the request's is epoch %q (token %d)", t.RunID, epoch, highest, t.Epoch, t.Value)
	}
	if inWrite {
		p.Status = http.StatusServiceUnavailable
		p.Detail += "; it was raised while this request was in flight: retry, and the retry is refused with 409"
		w.Header().Set("Retry-After", "1")
	}
	p.Write(w)
}

// fenceOf reads the ledger's fence of run.
func (s *server) fenceOf(ctx context.Context, run string) (string, int64, error) {
	var (
		epoch string
		token int64
	)
	q := books.Rebind(s.db.Dialect(), `SELECT epoch, token FROM `+s.fences+` WHERE run_id = ?`)
	if err := s.db.SQL().QueryRowContext(ctx, q, run).Scan(&epoch, &token); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return "", 0, fmt.Errorf("reading the fence of run %q: %w", run, err)
	}
	return epoch, token, nil
}

func (s *server) post(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	key, err := httpidem.ParseKey(r.Header.Get(httpidem.KeyHeader))
	if err != nil { // the middleware refused it already
		badEntry(w, key, "Idempotency-Key: "+err.Error())
		return
	}
	t, ok := s.token(w, r)
	if !ok {
		return
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	var in entry
	if err := dec.Decode(&in); err != nil {
		badEntry(w, key, "the body is not a ledger entry: "+err.Error())
		return
	}
	if dec.More() {
		badEntry(w, key, "the body holds more than one JSON value")
		return
	}
	if in.Key != "" && in.Key != key {
		refused(w, key, fmt.Sprintf("the body's key %q is not the Idempotency-Key %q", in.Key, key), books.ErrInvalid)
		return
	}
	in.Key = key
	if in.CreatedAt == "" {
		in.CreatedAt = s.now().UTC().Format(time.RFC3339)
	}
	if s.hooks.BeforeWrite != nil {
		s.hooks.BeforeWrite(ctx)
	}
	inserted, err := s.ledger.Post(ctx, t, in.books())
	if err != nil {
		if errors.Is(err, fence.ErrFenced) || errors.Is(err, fence.ErrForeignEpoch) {
			s.fenceProblem(ctx, w, t, key, err, true)
			return
		}
		for _, refusal := range []error{books.ErrNotNegation, books.ErrAlreadyReversed, books.ErrNoOriginal, books.ErrConflict, books.ErrInvalid, fence.ErrInvalidToken} {
			if errors.Is(err, refusal) {
				refused(w, key, err.Error(), refusal)
				return
			}
		}
		s.unavailable(ctx, w, "the entry could not be written", err, t.RunID)
		return
	}
	if s.hooks.AfterWrite != nil {
		s.hooks.AfterWrite(ctx)
	}
	stored, found, err := s.ledger.Get(ctx, key)
	if err != nil || !found {
		// Written, so the answer must not be a 5xx (which would release the key): the
		// entry as posted is the row, created_at aside.
		s.log.WarnContext(ctx, "reading back a ledger entry", logKey, key, logErr, err)
		stored = in.books()
	}
	status := http.StatusOK
	if inserted {
		status = http.StatusCreated
	}
	w.Header().Set("Location", path.Dir(r.URL.Path)+"/entries/"+url.PathEscape(key))
	writeEntry(w, status, stored)
}

// raise raises the ledger's fence of the request's run to its token (books.Ledger.
// RaiseFence, over HTTP): 200 with the fence, or 409 naming both tokens.
func (s *server) raise(w http.ResponseWriter, r *http.Request) {
	t, ok := s.token(w, r)
	if !ok {
		return
	}
	if err := s.ledger.RaiseFence(r.Context(), t); err != nil {
		s.fenceProblem(r.Context(), w, t, "", err, false)
		return
	}
	writeJSON(w, http.StatusOK, Fence{RunID: t.RunID, Epoch: t.Epoch, Token: t.Value})
}

// Fence is the answer of POST /v1/fences: the run's fence as the ledger holds it.
type Fence struct {
	RunID string `json:"run_id"`
	Epoch string `json:"epoch"`
	Token uint64 `json:"token"`
}

// list answers GET /v1/entries?run_id=RUN: every entry of the run, in key order.
func (s *server) list(w http.ResponseWriter, r *http.Request) {
	run := r.URL.Query().Get("run_id")
	if run == "" {
		httpidem.Problem{Type: TypeBadEntry, Title: "No run", Status: http.StatusBadRequest,
			Detail: "GET " + r.URL.Path + " lists the entries of one run: add ?run_id=RUN"}.Write(w)
		return
	}
	es, err := s.ledger.ListRun(r.Context(), run)
	if err != nil {
		s.unavailable(r.Context(), w, "the run's entries could not be read", err, run)
		return
	}
	out := entryList{Entries: make([]entry, len(es))}
	for i, e := range es {
		out.Entries[i] = fromBooks(e)
	}
	writeJSON(w, http.StatusOK, out)
}

// entryList is the answer of GET /v1/entries?run_id=RUN.
type entryList struct {
	Entries []entry `json:"entries"`
}

func (s *server) get(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	e, found, err := s.ledger.Get(r.Context(), key)
	switch {
	case err != nil:
		s.unavailable(r.Context(), w, "the entry could not be read", err, "")
	case !found:
		httpidem.Problem{Type: TypeNotFound, Title: "No such entry", Status: http.StatusNotFound,
			Detail: fmt.Sprintf("the ledger holds no entry under key %q", key), Extensions: map[string]any{"key": key}}.Write(w)
	default:
		writeEntry(w, http.StatusOK, e)
	}
}

func writeEntry(w http.ResponseWriter, status int, e books.Entry) { writeJSON(w, status, fromBooks(e)) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	b := jsonBody(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

func jsonBody(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(`{}`) // entries and fences of strings and integers always encode
	}
	return append(b, '\n')
}

func badEntry(w http.ResponseWriter, key, detail string) {
	httpidem.Problem{Type: TypeBadEntry, Title: "Malformed ledger entry", Status: http.StatusBadRequest,
		Detail: detail, Extensions: map[string]any{"key": key}}.Write(w)
}

// refused answers a refusal of the ledger's rules: 422 naming the ledger's error.
func refused(w http.ResponseWriter, key, detail string, ledgerErr error) {
	httpidem.Problem{Type: TypeRefused, Title: "Refused by the ledger", Status: http.StatusUnprocessableEntity,
		Detail: detail, Extensions: map[string]any{"key": key, "ledger_error": ledgerErr.Error()}}.Write(w)
}

func (s *server) unavailable(ctx context.Context, w http.ResponseWriter, what string, err error, run string) {
	s.log.ErrorContext(ctx, what, logRun, run, logErr, err)
	w.Header().Set("Retry-After", "1")
	httpidem.Problem{Type: TypeUnavailable, Title: "Ledger unavailable", Status: http.StatusServiceUnavailable,
		Detail: what + "; retry later"}.Write(w)
}
