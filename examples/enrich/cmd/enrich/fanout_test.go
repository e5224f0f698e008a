package main

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cairnhq/cairn/examples/enrich"
	"github.com/cairnhq/cairn/examples/enrich/stubapi"
)

// together stands in front of the three enrichment APIs (real HTTP, a reverse proxy to
// each stub) and holds every call until there is a moment when each of the three has a
// call held at once; from then on it lets every call through. Steps that ran one after
// another would never meet there: the first one's calls would time out, one try after
// another, until the run is handed over.
type together struct {
	mu   sync.Mutex
	held map[string]int
	met  chan struct{}
	done bool
}

func newTogether() *together {
	return &together{held: map[string]int{}, met: make(chan struct{})}
}

// front starts the proxy of api to target and returns its base URL.
func (g *together) front(t *testing.T, api, target string) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.ErrorLog = log.New(io.Discard, "", 0) // a call its caller gave up on mid-way
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.held[api]++
		if !g.done && g.held[stubapi.APIProfile] > 0 && g.held[stubapi.APIGeo] > 0 && g.held[stubapi.APIRisk] > 0 {
			g.done = true
			close(g.met)
		}
		g.mu.Unlock()
		select {
		case <-g.met:
		case <-r.Context().Done(): // the caller gave up (its call timeout): the stub never sees it
		}
		g.mu.Lock()
		g.held[api]--
		g.mu.Unlock()
		if r.Context().Err() != nil {
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func (g *together) wasMet() bool {
	select {
	case <-g.met:
		return true
	default:
		return false
	}
}

// The three enrichment steps run side by side once fetch is verified: the profile, geo and
// risk APIs each have a call open at the same moment. Then risk times out on record 7 more
// often than an attempt retries it; its attempt fails and the next resumes at record 7,
// while profile and geo, verified on their own, are not run again: every record's profile
// and geo are asked for exactly once, validate puts the three outputs together once (the
// rows are the uninterrupted run's), and each record is uploaded once.
func TestEnrichmentSideBySide(t *testing.T) {
	t.Parallel()
	j := newJob(t, 30, stubapi.Config{Hang: map[string]int{"rec-0007": 4}, HangFor: 10 * time.Second})
	g := newTogether()
	env := []string{ // after newJob's, so these are the services' URLs
		"ENRICH_PROFILE_URL=" + g.front(t, stubapi.APIProfile, j.apis.ProfileURL),
		"ENRICH_GEO_URL=" + g.front(t, stubapi.APIGeo, j.apis.GeoURL),
		"ENRICH_RISK_URL=" + g.front(t, stubapi.APIRisk, j.apis.RiskURL),
	}
	rec := j.run("run-side-by-side", env...)
	if !g.wasMet() {
		t.Fatal("the profile, geo and risk APIs never had a call open at the same moment: the enrichment steps did not run side by side")
	}
	j.checkOnce(rec, map[string]map[string]int{stubapi.APIRisk: {"rec-0007": 4}})
	c := j.apis.Counts()
	for _, api := range enrichSteps {
		if got, want := c.Calls[api], len(j.records)+map[string]int{stubapi.APIRisk: 4}[api]; got != want {
			t.Errorf("the %s API had %d calls, want %d", api, got, want)
		}
	}
	if c.TooMany != 0 {
		t.Errorf("the geo API sent %d 429s: the declared limit should keep under its rate", c.TooMany)
	}
	t.Logf("risk's attempts after its first: %d; the run's restarts: %d", rec.Steps[enrich.Risk].Attempts, rec.Restarts)
	if a := rec.Steps[enrich.Risk].Attempts; a < 1 {
		t.Errorf("risk has %d attempts after its first, want its failed attempt counted", a)
	}
	for _, s := range []string{enrich.Fetch, enrich.Profile, enrich.Geo, enrich.Validate, enrich.Transform, enrich.Upload} {
		if a := rec.Steps[s].Attempts; a != 0 {
			t.Errorf("%s has %d attempts after its first, want none: risk's failure is risk's alone", s, a)
		}
	}
	// The record holds the graph: the three after fetch, validate after the three.
	for s, want := range map[string][]string{enrich.Profile: {enrich.Fetch}, enrich.Geo: {enrich.Fetch}, enrich.Risk: {enrich.Fetch},
		enrich.Validate: {enrich.Profile, enrich.Geo, enrich.Risk}, enrich.Upload: {enrich.Transform}} {
		if got := rec.After[s]; !slices.Equal(got, want) {
			t.Errorf("the record's after[%s] = %v, want %v", s, got, want)
		}
	}
}
