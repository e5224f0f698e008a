// Package stubapi runs the enrich job's outside systems as real HTTP servers on
// loopback ports: a slow profile API, a rate-limited geo API, a risk API whose calls
// for chosen records hang, and an upload system made idempotent and fenced by
// pkg/httpidem over a SQLite file, which also reverses an upload (POST
// /v1/uploads/{key}/reversal, once per upload, the row kept and marked reversed). Every [APIs] from [Start] is independent of any
// other (no package-level state), so a demo can run two jobs side by side.
package stubapi

import (
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" driver
)

// Defaults of a [Config].
const (
	DefaultProfileDelay = 20 * time.Millisecond
	DefaultGeoRate      = 20
	DefaultHangFor      = 30 * time.Second
)

// API names, as [Counts] keys them.
const (
	APIProfile = "profile"
	APIGeo     = "geo"
	APIRisk    = "risk"
	APIUpload  = "upload"
	// APIReversal counts the reversal requests (POST /v1/uploads/{key}/reversal).
	APIReversal = "reversal"
)

// Config shapes the outside systems' behaviour.
type Config struct {
	// Dir holds the upload system's SQLite file, Dir/uploads.db. Required.
	Dir string
	// ProfileDelay is how long the profile API takes per call (default 20ms).
	ProfileDelay time.Duration
	// GeoRate is how many calls the geo API answers per one-second window (default
	// 20); past it, it answers 429 with Retry-After: 1.
	GeoRate int
	// Hang makes the risk API hang: record id -> how many of that record's first calls
	// hang.
	Hang map[string]int
	// HangFor is how long a hung call hangs before it answers 504, unless the client
	// gives up first (default 30s).
	HangFor time.Duration
}

func (c Config) withDefaults() Config {
	if c.ProfileDelay == 0 {
		c.ProfileDelay = DefaultProfileDelay
	}
	if c.GeoRate == 0 {
		c.GeoRate = DefaultGeoRate
	}
	if c.HangFor == 0 {
		c.HangFor = DefaultHangFor
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Dir == "":
		return errors.New("no Dir for the upload database")
	case c.ProfileDelay < 0:
		return fmt.Errorf("ProfileDelay %s is negative", c.ProfileDelay)
	case c.GeoRate < 0:
		return fmt.Errorf("GeoRate %d is negative", c.GeoRate)
	case c.HangFor < 0:
		return fmt.Errorf("HangFor %s is negative", c.HangFor)
	}
	for id, n := range c.Hang {
		if n < 0 {
			return fmt.Errorf("Hang[%q] = %d is negative", id, n)
		}
	}
	return nil
}

// APIs is the running outside systems: each URL is a base URL (http://127.0.0.1:port)
// to which the paths of the package doc are added.
type APIs struct {
	ProfileURL, GeoURL, RiskURL, UploadURL string

	cfg     Config
	db      *sql.DB
	servers []*http.Server
	wg      sync.WaitGroup
	stats   *stats
	geo     *window
}

// Start starts the four servers on 127.0.0.1:0 and creates the upload database.
func Start(c Config) (*APIs, error) {
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("starting the stub APIs: %w", err)
	}
	c = c.withDefaults()
	hang := make(map[string]int, len(c.Hang))
	for id, n := range c.Hang {
		hang[id] = n
	}
	c.Hang = hang
	a := &APIs{cfg: c, stats: newStats(), geo: &window{limit: c.GeoRate}}
	db, err := openDB(filepath.Join(c.Dir, "uploads.db"))
	if err != nil {
		return nil, fmt.Errorf("starting the stub APIs: %w", err)
	}
	a.db = db
	for _, s := range []struct {
		url *string
		h   http.Handler
	}{
		{&a.ProfileURL, a.profileHandler()},
		{&a.GeoURL, a.geoHandler()},
		{&a.RiskURL, a.riskHandler()},
		{&a.UploadURL, a.uploadHandler()},
	} {
		u, err := a.serve(s.h)
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("starting the stub APIs: %w", err)
		}
		*s.url = u
	}
	return a, nil
}

// serve serves h on a new loopback listener and returns its base URL.
func (a *APIs) serve(h http.Handler) (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("listening: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	a.servers = append(a.servers, srv)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		srv.Serve(l) // returns http.ErrServerClosed on Close
	}()
	return "http://" + l.Addr().String(), nil
}

// Close closes every server (cutting hung calls short) and the database.
func (a *APIs) Close() {
	for _, s := range a.servers {
		s.Close()
	}
	a.wg.Wait()
	if a.db != nil {
		a.db.Close()
	}
}

// Counts is a snapshot of what the outside systems saw.
type Counts struct {
	// Calls is the requests received per API name ("profile", "geo", "risk", "upload":
	// POSTs of uploads only, not the GET listing; "reversal": POSTs of reversals).
	Calls map[string]int
	// PerRecord is api -> record id -> requests received for it.
	PerRecord map[string]map[string]int
	// TooMany is the 429s the geo API sent.
	TooMany int
	// Hung is the risk calls that started to hang.
	Hung int
	// Uploads is the rows of the uploads table, Records the distinct record ids among
	// them, and Duplicates Uploads - Records: the records uploaded more than once. These
	// three are read from the database, which Reset does not touch. A reversed upload stays
	// a row: they count it still.
	Uploads, Records, Duplicates int
	// Reversed is the rows of Uploads reversed (POST /v1/uploads/{key}/reversal), each at
	// most once; read from the database too.
	Reversed int
	// Fenced is the uploads and reversals refused 409 with problem type TypeFenced.
	Fenced int
	// Err is set when the database could not be read; the four counts from it are
	// then -1.
	Err error
}

// Counts reads the counters and the database's counts. It is safe for concurrent use.
func (a *APIs) Counts() Counts {
	c := a.stats.snapshot()
	err := a.db.QueryRow(`SELECT COUNT(*), COUNT(DISTINCT record_id), (SELECT COUNT(*) FROM reversals) FROM uploads`).Scan(&c.Uploads, &c.Records, &c.Reversed)
	if err != nil {
		c.Uploads, c.Records, c.Duplicates, c.Reversed, c.Err = -1, -1, -1, -1, fmt.Errorf("counting uploads: %w", err)
		return c
	}
	c.Duplicates = c.Uploads - c.Records
	return c
}

// Reset zeroes the counters (not the database, nor the rate window, nor how many calls
// of a record have hung).
func (a *APIs) Reset() { a.stats.reset() }

// stats is the counters, under one mutex.
type stats struct {
	mu        sync.Mutex
	calls     map[string]int
	perRecord map[string]map[string]int
	tooMany   int
	hung      int
	fenced    int
}

func newStats() *stats {
	s := &stats{}
	s.reset()
	return s
}

func (s *stats) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = map[string]int{}
	s.perRecord = map[string]map[string]int{}
	s.tooMany, s.hung, s.fenced = 0, 0, 0
}

// call counts a request to api for record id ("" when the request names none).
func (s *stats) call(api, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[api]++
	if id == "" {
		return
	}
	m := s.perRecord[api]
	if m == nil {
		m = map[string]int{}
		s.perRecord[api] = m
	}
	m[id]++
}

func (s *stats) add(f func(*stats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

func (s *stats) snapshot() Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := Counts{Calls: make(map[string]int, len(s.calls)), PerRecord: make(map[string]map[string]int, len(s.perRecord)),
		TooMany: s.tooMany, Hung: s.hung, Fenced: s.fenced}
	for k, v := range s.calls {
		c.Calls[k] = v
	}
	for api, m := range s.perRecord {
		cp := make(map[string]int, len(m))
		for k, v := range m {
			cp[k] = v
		}
		c.PerRecord[api] = cp
	}
	return c
}

// window is a fixed one-second window counter of calls.
type window struct {
	mu    sync.Mutex
	limit int
	start time.Time
	n     int
}

// allow counts a call at now and says whether it is within the window's limit.
func (w *window) allow(now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if now.Sub(w.start) >= time.Second {
		w.start, w.n = now, 0
	}
	if w.n >= w.limit {
		return false
	}
	w.n++
	return true
}
