package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/recon"
	"github.com/cairnhq/cairn/internal/service"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

var billTo = regexp.MustCompile(`(?m)^Bill To: .*\[(\S+)\]`)

// modelCall is one call a recording model endpoint received.
type modelCall struct {
	at        time.Time
	warehouse string
}

// recordingModel answers like the model of TestNightWithAModelEndpoint, by the rules, and
// records when each call arrived and for which warehouse.
type recordingModel struct {
	mu    sync.Mutex
	calls []modelCall
}

func (m *recordingModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	var req struct {
		Messages []struct {
			Content string `json:"content"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	doc := req.Messages[len(req.Messages)-1].Content
	no, wh := invoiceNoLine.FindStringSubmatch(doc), billTo.FindStringSubmatch(doc)
	if no == nil || wh == nil {
		http.Error(w, "not an invoice", http.StatusBadRequest)
		return
	}
	m.mu.Lock()
	m.calls = append(m.calls, modelCall{at: at, warehouse: wh[1]})
	m.mu.Unlock()
	answer, err := recon.RuleExtractor{}.Extract(r.Context(), no[1], []byte(doc))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	writeChat(w, string(answer))
}

func (m *recordingModel) recorded() []modelCall {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.calls)
}

// mostWithinASecond is the most calls that arrived less than a second apart from the first
// of them: the fullest one-second window.
func mostWithinASecond(calls []modelCall) int {
	best, first := 0, 0
	for i, c := range calls {
		for c.at.Sub(calls[first].at) >= time.Second {
			first++
		}
		best = max(best, i-first+1)
	}
	return best
}

// Two extract processes, each on its own night at the same time, against one model
// endpoint with CAIRN_MODEL_RPS=4: the calls the endpoint receives stay within 4 a second
// in every one-second window, with the burst of 1 (5 at the window's edges), although
// each process alone could send 4 a second; each process was granted some of them, as its
// metrics say, and together all of them.
func TestModelRateSharedByTwoExtracts(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	const rps, invoices = 4, 16
	h := newProcsNight(t)
	ctx := context.Background()
	whs := []string{"rla", "rlb"}
	for _, wh := range whs {
		if _, err := recon.Generate(ctx, recon.GenConfig{Warehouse: wh, Date: date, Invoices: invoices, Mismatches: 3, Seed: 7,
			InboxDir: filepath.Join(h.dir, "inbox"), ERPPath: filepath.Join(h.dir, "erp.db"), TruthDir: filepath.Join(h.dir, "truth-"+wh)}); err != nil {
			t.Fatal(err)
		}
	}
	model := &recordingModel{}
	srv := httptest.NewServer(model)
	t.Cleanup(srv.Close)
	env := []string{"CAIRN_MODEL_URL=" + srv.URL + "/v1", "CAIRN_MODEL_NAME=local-model", "CAIRN_MODEL_KEY=sk-test",
		fmt.Sprintf("CAIRN_MODEL_RPS=%d", rps), "CAIRN_MODEL_TIMEOUT=10s", "CAIRN_STEP_CONCURRENCY=1"}
	ps := h.svcs([]string{"supervisor", "fetch", "extract", "extract"}, env...)
	for _, wh := range whs {
		h.publish(events.RunStartSubject, fmt.Sprintf(`{"warehouse":%q,"date":%q}`, wh, date))
	}
	h.waitExtracted(runLimit, "run-"+date+"-"+whs[0], "run-"+date+"-"+whs[1])

	calls := model.recorded()
	slices.SortFunc(calls, func(a, b modelCall) int { return a.at.Compare(b.at) })
	if len(calls) != 2*invoices {
		t.Errorf("the model received %d calls, want %d (one per invoice)", len(calls), 2*invoices)
	}
	allowed := service.Config{ModelRPS: rps}.ModelLimit().MostIn(time.Second)
	got := mostWithinASecond(calls)
	if len(calls) > 0 {
		t.Logf("%d calls in %s, at most %d within one second", len(calls), calls[len(calls)-1].at.Sub(calls[0].at), got)
	}
	if got > allowed {
		t.Errorf("%d calls within one second, CAIRN_MODEL_RPS=%d with burst %d allows %d", got, rps, service.ModelBurst, allowed)
	}
	// The two nights were asked at the same time, by two processes (one step at a time each).
	last := map[string]time.Time{}
	first := map[string]time.Time{}
	for _, c := range calls {
		if _, ok := first[c.warehouse]; !ok {
			first[c.warehouse] = c.at
		}
		last[c.warehouse] = c.at
	}
	if !first[whs[0]].Before(last[whs[1]]) || !first[whs[1]].Before(last[whs[0]]) {
		t.Errorf("the nights' calls did not overlap (%s: %s to %s, %s: %s to %s): the test shows nothing",
			whs[0], first[whs[0]], last[whs[0]], whs[1], first[whs[1]], last[whs[1]])
	}
	var granted float64
	for _, p := range ps[2:] {
		g := metricValue(h.scrape(p), "cairn_model_limit_grants_total")
		if g == 0 {
			t.Errorf("%s was granted no model call", filepath.Base(p.Log))
		}
		granted += g
	}
	if int(granted) != len(calls) {
		t.Errorf("the extract processes were granted %v calls, the model received %d", granted, len(calls))
	}
	kv, err := h.js.KeyValue(ctx, assets.BucketLimits)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, service.ModelLimitKey); err != nil || !strings.Contains(string(e.Value()), `"burst":1`) {
		t.Errorf("the model's limit in %s: %v, %v", assets.BucketLimits, e, err)
	}
}

// waitExtracted watches the runs' checkpoints until each has its extract step verified.
func (h *procsNight) waitExtracted(limit time.Duration, runs ...string) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	kv, err := h.js.KeyValue(ctx, assets.BucketRuns)
	if err != nil {
		h.t.Fatal(err)
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	done := map[string]bool{}
	last := map[string]string{}
	for e := range w.Updates() {
		if e == nil || e.Operation() != jetstream.KeyValuePut || !slices.Contains(runs, e.Key()) {
			continue
		}
		r, err := kc.Decode(e.Value())
		if err != nil {
			h.t.Fatal(err)
		}
		last[r.RunID] = fmt.Sprintf("%s, extract %s", r.Status, r.Step("extract").Status)
		if r.Step("extract").Status == kc.Verified {
			done[r.RunID] = true
		}
		if len(done) == len(runs) {
			return
		}
	}
	h.t.Fatalf("the runs' extract steps were not all verified within %s: %v", limit, last)
}
