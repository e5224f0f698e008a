package httpidem_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnhq/cairn/pkg/httpidem"
	"github.com/cairnhq/cairn/pkg/identity"
)

// signer is a new service key, and ring a ring of the keys registered.
func newSigner(t *testing.T, name string) *identity.Signer {
	t.Helper()
	seed, err := identity.NewSeed()
	if err != nil {
		t.Fatal(err)
	}
	s, err := identity.NewSigner(name, seed)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Authenticate lets through only requests signed by a registered service within the skew,
// over the method, the URI, the time, the key, the fence and the body's digest; the
// handler sees the caller. Every refusal leaves the handler unrun.
func TestAuthenticate(t *testing.T) {
	t.Parallel()
	poster, stranger := newSigner(t, "post-ledger"), newSigner(t, "post-ledger")
	ring := identity.NewRing(map[string]string{"post-ledger": poster.PublicKey()}, identity.Seal{})
	now := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	auth, err := httpidem.Authenticate(httpidem.AuthConfig{Ring: ring, Now: func() time.Time { return now }, MaxBody: 64})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	srv := httptest.NewServer(auth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		body, _ := io.ReadAll(r.Body)
		io.WriteString(w, httpidem.CallerOf(r.Context())+" "+string(body))
	})))
	t.Cleanup(srv.Close)

	body := []byte(`{"amount_paise":100}`)
	request := func(path string, b []byte) *http.Request {
		req, err := http.NewRequest(http.MethodPost, srv.URL+path, bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(httpidem.KeyHeader, `"k-1"`)
		req.Header.Set(httpidem.DefaultRunHeader, "run-1")
		req.Header.Set(httpidem.DefaultTokenHeader, "7")
		return req
	}
	signed := func(s *identity.Signer, at time.Time) *http.Request {
		req := request("/v1/entries?x=1", body)
		httpidem.Sign(req, body, s, at)
		return req
	}
	cases := []struct {
		name   string
		req    func() *http.Request
		status int
		typ    string
	}{
		{"unsigned", func() *http.Request { return request("/v1/entries", body) }, 401, httpidem.TypeUnauthenticated},
		{"an unregistered key under a registered name", func() *http.Request { return signed(stranger, now) }, 401, httpidem.TypeUnauthenticated},
		{"too old", func() *http.Request { return signed(poster, now.Add(-6*time.Minute)) }, 401, httpidem.TypeUnauthenticated},
		{"too new", func() *http.Request { return signed(poster, now.Add(6*time.Minute)) }, 401, httpidem.TypeUnauthenticated},
		{"another path", func() *http.Request {
			r := signed(poster, now)
			r.URL.Path = "/v1/fences"
			return r
		}, 401, httpidem.TypeUnauthenticated},
		{"another query", func() *http.Request {
			r := signed(poster, now)
			r.URL.RawQuery = "x=2"
			return r
		}, 401, httpidem.TypeUnauthenticated},
		{"another run", func() *http.Request {
			r := signed(poster, now)
			r.Header.Set(httpidem.DefaultRunHeader, "run-2")
			return r
		}, 401, httpidem.TypeUnauthenticated},
		{"another token", func() *http.Request {
			r := signed(poster, now)
			r.Header.Set(httpidem.DefaultTokenHeader, "9223372036854775807")
			return r
		}, 401, httpidem.TypeUnauthenticated},
		{"another key", func() *http.Request {
			r := signed(poster, now)
			r.Header.Set(httpidem.KeyHeader, `"k-2"`)
			return r
		}, 401, httpidem.TypeUnauthenticated},
		{"another body under the signed digest", func() *http.Request {
			r := signed(poster, now)
			other := []byte(`{"amount_paise":999}`)
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(other)), int64(len(other))
			return r
		}, 400, httpidem.TypeDigestMismatch},
		{"another body and its digest", func() *http.Request {
			r := signed(poster, now)
			other := []byte(`{"amount_paise":999}`)
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(other)), int64(len(other))
			r.Header.Set(httpidem.DigestHeader, httpidem.ContentDigest(other))
			return r
		}, 401, httpidem.TypeUnauthenticated},
		{"a write without a digest", func() *http.Request {
			r := request("/v1/entries", body)
			httpidem.Sign(r, nil, poster, now)
			return r
		}, 400, httpidem.TypeDigestMissing},
		{"a body over the limit", func() *http.Request {
			big := []byte(strings.Repeat("x", 65))
			r := request("/v1/entries", big)
			httpidem.Sign(r, big, poster, now)
			return r
		}, 413, httpidem.TypeBodyTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := do(t, c.req())
			if a.status != c.status || a.problem(t).Type != c.typ {
				t.Fatalf("%d %s, want %d %s", a.status, a.body, c.status, c.typ)
			}
		})
	}
	if runs.Load() != 0 {
		t.Fatalf("the handler ran %d times on refused requests", runs.Load())
	}
	for _, at := range []time.Time{now, now.Add(-4 * time.Minute), now.Add(4 * time.Minute)} {
		a := do(t, signed(poster, at))
		if a.status != http.StatusOK || string(a.body) != "post-ledger "+string(body) {
			t.Fatalf("signed at %s: %d %s, want 200 from post-ledger with the body", at, a.status, a.body)
		}
	}
	get, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/entries/k-1", nil)
	httpidem.Sign(get, nil, poster, now)
	if a := do(t, get); a.status != http.StatusOK {
		t.Fatalf("a signed GET: %d %s", a.status, a.body)
	}
}

// Allow answers 403 to an authenticated caller not named, and lets the named through.
func TestAllow(t *testing.T) {
	t.Parallel()
	poster, reader := newSigner(t, "post-ledger"), newSigner(t, "report")
	ring := identity.NewRing(map[string]string{"post-ledger": poster.PublicKey(), "report": reader.PublicKey()}, identity.Seal{})
	auth, err := httpidem.Authenticate(httpidem.AuthConfig{Ring: ring})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(auth(httpidem.Allow("post-ledger")(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))))
	t.Cleanup(srv.Close)
	for _, c := range []struct {
		s      *identity.Signer
		status int
	}{{poster, 200}, {reader, 403}} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/entries/k", nil)
		httpidem.Sign(req, nil, c.s, time.Now())
		if a := do(t, req); a.status != c.status {
			t.Fatalf("%s: %d %s, want %d", c.s.Name(), a.status, a.body, c.status)
		}
	}
}

// The client signs each call with its Signer: the server sees who calls.
func TestClientSigns(t *testing.T) {
	t.Parallel()
	poster := newSigner(t, "post-ledger")
	ring := identity.NewRing(map[string]string{"post-ledger": poster.PublicKey()}, identity.Seal{})
	auth, err := httpidem.Authenticate(httpidem.AuthConfig{Ring: ring})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(auth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"`+httpidem.CallerOf(r.Context())+`"}`)
	})))
	t.Cleanup(srv.Close)
	for _, s := range []*identity.Signer{nil, poster} {
		c, err := httpidem.NewClient(httpidem.ClientConfig{Signer: s})
		if err != nil {
			t.Fatal(err)
		}
		rc, err := c.Write(t.Context(), httpidem.Request{URL: srv.URL + "/v1/entries", Key: "k-1", Run: "run-1", Token: 3, Body: []byte(`{}`)})
		if s == nil {
			if err == nil || !strings.Contains(err.Error(), "401") {
				t.Fatalf("an unsigned write: %+v %v, want a 401 rejection", rc, err)
			}
			continue
		}
		if err != nil || rc.Reference != "post-ledger" {
			t.Fatalf("a signed write: %+v %v, want 201 from post-ledger", rc, err)
		}
	}
}

func do(t *testing.T, req *http.Request) answer {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}
