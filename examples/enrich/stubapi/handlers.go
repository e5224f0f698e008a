package stubapi

import (
	"encoding/json"
	"hash/fnv"
	"net/http"
	"regexp"
	"strconv"
	"time"
)

// idShape is the shape of a record id the enrichment APIs accept.
var idShape = regexp.MustCompile(`^rec-[0-9]{4,}$`)

var (
	segments = []string{"retail", "smb", "enterprise", "startup"}
	regions  = []struct{ region, tz string }{
		{"ap-south", "Asia/Kolkata"}, {"us-east", "America/New_York"}, {"eu-west", "Europe/London"},
		{"eu-central", "Europe/Berlin"}, {"ap-northeast", "Asia/Tokyo"}, {"sa-east", "America/Sao_Paulo"},
	}
)

// hash is a deterministic number of id for api, so that each API's values are a
// function of the id alone.
func hash(api, id string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(api + "\n" + id))
	return h.Sum32()
}

// ProfileOf, GeoOf and RiskOf are the values the APIs answer for id, for tests to
// compare with.
func ProfileOf(id string) string { return segments[hash(APIProfile, id)%uint32(len(segments))] }

// GeoOf is the region and timezone the geo API answers for id.
func GeoOf(id string) (region, timezone string) {
	r := regions[hash(APIGeo, id)%uint32(len(regions))]
	return r.region, r.tz
}

// RiskOf is the score (0..100) the risk API answers for id.
func RiskOf(id string) int { return int(hash(APIRisk, id) % 101) }

// enrichment serves GET /v1/{api}/{id}: it counts the call, refuses a bad id with 400,
// and otherwise leaves the answer to serve, which returns the body to send (nil when
// it has answered itself).
func (a *APIs) enrichment(api string, serve func(w http.ResponseWriter, r *http.Request, id string) any) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/"+api+"/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		a.stats.call(api, id)
		if !idShape.MatchString(id) {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "record id " + strconv.Quote(id) + " is not rec-NNNN"})
			return
		}
		if body := serve(w, r, id); body != nil {
			writeJSON(w, http.StatusOK, body)
		}
	})
	return mux
}

func (a *APIs) profileHandler() http.Handler {
	return a.enrichment(APIProfile, func(w http.ResponseWriter, r *http.Request, id string) any {
		t := time.NewTimer(a.cfg.ProfileDelay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return nil // the client has gone
		}
		return map[string]string{"id": id, "segment": ProfileOf(id)}
	})
}

func (a *APIs) geoHandler() http.Handler {
	return a.enrichment(APIGeo, func(w http.ResponseWriter, r *http.Request, id string) any {
		if !a.geo.allow(time.Now()) {
			a.stats.add(func(s *stats) { s.tooMany++ })
			w.Header().Set("Retry-After", "1")
			writeJSON(w, http.StatusTooManyRequests, map[string]string{"error": "rate limited: " + strconv.Itoa(a.geo.limit) + " calls a second"})
			return nil
		}
		region, tz := GeoOf(id)
		return map[string]string{"id": id, "region": region, "timezone": tz}
	})
}

func (a *APIs) riskHandler() http.Handler {
	return a.enrichment(APIRisk, func(w http.ResponseWriter, r *http.Request, id string) any {
		hang := false
		a.stats.add(func(s *stats) {
			// The record's calls so far, this one included, were counted by enrichment;
			// hangs are decided by a count Reset does not clear.
			if a.cfg.Hang[id] > 0 {
				a.cfg.Hang[id]--
				hang = true
				s.hung++
			}
		})
		if hang {
			t := time.NewTimer(a.cfg.HangFor)
			defer t.Stop()
			select {
			case <-t.C:
				writeJSON(w, http.StatusGatewayTimeout, map[string]string{"error": "risk model timed out"})
			case <-r.Context().Done():
			}
			return nil
		}
		return map[string]any{"id": id, "score": RiskOf(id)}
	})
}

// writeJSON answers status with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}
