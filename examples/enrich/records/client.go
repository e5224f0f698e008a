package records

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"syscall"
	"time"
)

// The names of the three enrichment APIs, as errors and counters name them.
const (
	APIProfile = "profile"
	APIGeo     = "geo"
	APIRisk    = "risk"
)

// Client calls the three enrichment APIs. Each URL is the API's base URL (scheme and
// host, e.g. "http://127.0.0.1:41233"); the paths are /v1/profile/{id}, /v1/geo/{id}
// and /v1/risk/{id}. HTTP nil means http.DefaultClient. A call is bounded by its
// context only: the caller sets the deadline.
type Client struct {
	ProfileURL, GeoURL, RiskURL string
	HTTP                        *http.Client
}

// TooManyError is a 429 answer: the API asks to be called again after RetryAfter (its
// Retry-After header in seconds; 0 when it sent none or an unreadable one).
type TooManyError struct {
	API        string
	RetryAfter time.Duration
}

func (e *TooManyError) Error() string {
	return fmt.Sprintf("%s API: 429 too many requests, retry after %s", e.API, e.RetryAfter)
}

// ServerError is an answer of status 5xx, or any other status that is not 200 (then
// Status tells which: a 4xx is not temporary).
type ServerError struct {
	API    string
	Status int
	Body   string // the first bytes of the answer, for the log
}

func (e *ServerError) Error() string {
	s := fmt.Sprintf("%s API: status %d", e.API, e.Status)
	if e.Body != "" {
		s += ": " + e.Body
	}
	return s
}

// Profile fetches record id's profile; the []byte is the answer's body as sent, so that
// a caller may memoise it word for word and parse it again with ParseProfile.
func (c Client) Profile(ctx context.Context, id string) (Profile, []byte, error) {
	b, err := c.get(ctx, APIProfile, c.ProfileURL, id)
	if err != nil {
		return Profile{}, nil, err
	}
	p, err := ParseProfile(b)
	return p, b, err
}

// Geo fetches record id's geo; see Profile for the []byte.
func (c Client) Geo(ctx context.Context, id string) (Geo, []byte, error) {
	b, err := c.get(ctx, APIGeo, c.GeoURL, id)
	if err != nil {
		return Geo{}, nil, err
	}
	g, err := ParseGeo(b)
	return g, b, err
}

// Risk fetches record id's risk score; see Profile for the []byte.
func (c Client) Risk(ctx context.Context, id string) (Risk, []byte, error) {
	b, err := c.get(ctx, APIRisk, c.RiskURL, id)
	if err != nil {
		return Risk{}, nil, err
	}
	r, err := ParseRisk(b)
	return r, b, err
}

// ParseProfile reads a profile API answer; a body without a segment is an error.
func ParseProfile(b []byte) (Profile, error) {
	var p Profile
	if err := json.Unmarshal(b, &p); err != nil {
		return Profile{}, fmt.Errorf("profile API: reading the answer: %w", err)
	}
	if p.Segment == "" {
		return Profile{}, errors.New("profile API: the answer has no segment")
	}
	return p, nil
}

// ParseGeo reads a geo API answer; a body without a region is an error.
func ParseGeo(b []byte) (Geo, error) {
	var g Geo
	if err := json.Unmarshal(b, &g); err != nil {
		return Geo{}, fmt.Errorf("geo API: reading the answer: %w", err)
	}
	if g.Region == "" {
		return Geo{}, errors.New("geo API: the answer has no region")
	}
	return g, nil
}

// ParseRisk reads a risk API answer; a body without a score is an error (the range is
// Validate's to check).
func ParseRisk(b []byte) (Risk, error) {
	var raw struct {
		Score *int `json:"score"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return Risk{}, fmt.Errorf("risk API: reading the answer: %w", err)
	}
	if raw.Score == nil {
		return Risk{}, errors.New("risk API: the answer has no score")
	}
	return Risk{Score: *raw.Score}, nil
}

// maxBody bounds an enrichment answer read.
const maxBody = 1 << 20

// get makes GET base/v1/{api}/{id} and returns the body of a 200 answer, else a
// *TooManyError, a *ServerError, or the transport's error prefixed with the API and the
// path.
func (c Client) get(ctx context.Context, api, base, id string) ([]byte, error) {
	if base == "" {
		return nil, fmt.Errorf("%s API: no URL configured", api)
	}
	path := "/v1/" + api + "/" + url.PathEscape(id)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return nil, fmt.Errorf("%s API: GET %s: %w", api, path, err)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is said once, as the path
		}
		return nil, fmt.Errorf("%s API: GET %s: %w", api, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, fmt.Errorf("%s API: GET %s: reading the answer: %w", api, path, err)
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		return b, nil
	case resp.StatusCode == http.StatusTooManyRequests:
		secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		return nil, &TooManyError{API: api, RetryAfter: time.Duration(max(secs, 0)) * time.Second}
	}
	return nil, &ServerError{API: api, Status: resp.StatusCode, Body: string(b[:min(len(b), 200)])}
}

// IsTemporary says whether err may go away on a retry: a 429, a 5xx, a timeout (a
// context deadline or a transport timeout), or a refused or reset connection. A
// cancelled context, a 4xx or an unreadable answer is not.
func IsTemporary(err error) bool {
	var tm *TooManyError
	var se *ServerError
	var ne net.Error
	switch {
	case err == nil:
		return false
	case errors.As(err, &tm):
		return true
	case errors.As(err, &se):
		return se.Status >= 500
	case errors.Is(err, context.DeadlineExceeded):
		return true
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET):
		return true
	case errors.As(err, &ne) && ne.Timeout():
		return true
	}
	return false
}
