package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/cairnhq/cairn/internal/recon"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

var invoiceNoLine = regexp.MustCompile(`(?m)^Invoice No: (\S+)`)

// The reference night asks a real (local) OpenAI-compatible model that is sometimes rate
// limited, sometimes fails, once too slow, and answers garbage about one invoice: the night
// finishes, the garbage invoice is parked, and the checkpoint records the model and prompt.
func TestNightWithAModelEndpoint(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newNight(t, 0)
	withAdjustments := map[string]bool{}
	for _, a := range n.truth.Adjustments {
		withAdjustments[a.InvoiceNo] = true
	}
	garbage := ""
	for i := 1; garbage == ""; i++ {
		if no := "INV-20261013-" + pad4(i); !withAdjustments[no] {
			garbage = no
		}
	}
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := calls.Add(1)
		var req struct {
			Model    string `json:"model"`
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || r.Header.Get("Authorization") != "Bearer sk-test" || req.Model != "local-model" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		doc := req.Messages[len(req.Messages)-1].Content
		no := invoiceNoLine.FindStringSubmatch(doc)[1]
		switch {
		case c == 5:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		case c == 9:
			w.WriteHeader(http.StatusBadGateway)
			return
		case c == 13:
			<-r.Context().Done() // slower than CAIRN_MODEL_TIMEOUT: the client gives up
			return
		case no == garbage:
			writeChat(w, "I think this invoice is for some bolts.")
			return
		}
		answer, err := recon.RuleExtractor{}.Extract(r.Context(), no, []byte(doc))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		writeChat(w, string(answer))
	}))
	t.Cleanup(srv.Close)

	n.start("CAIRN_MODEL_URL="+srv.URL+"/v1", "CAIRN_MODEL_NAME=local-model", "CAIRN_MODEL_KEY=sk-test",
		"CAIRN_MODEL_RPS=1000", "CAIRN_MODEL_TIMEOUT=1s")
	n.startRun()
	n.approveUnclear(0, "1 item parked at extract") // the garbage invoice
	rec := n.waitStatus(runLimit, kc.Done, kc.HandedOver)
	if rec.Status != kc.Done {
		t.Fatalf("status %s: %s", rec.Status, rec.NextAction)
	}
	n.assertTruth()
	ex := rec.Step("extract")
	if ex.ParkedCount != 1 || ex.Parked[0].Item != garbage {
		t.Errorf("parked %+v, want %s", ex.Parked, garbage)
	}
	if v := ex.Versions; v.Model == nil || *v.Model != "local-model" || v.Prompt == nil || *v.Prompt != recon.ModelPromptVersion {
		t.Errorf("extract's versions %+v, want the model and the prompt version recorded", v)
	}
	c := n.audit()
	if c["extractor.called"] != int(calls.Load()) || c["extractor.called"] < 312+3 {
		t.Errorf("extractor.called %d, model calls %d: every call audited, the 3 failures retried", c["extractor.called"], calls.Load())
	}
	if !slices.Contains(n.mailKeys(), runID+":report") {
		t.Error("no report")
	}
}

func writeChat(w http.ResponseWriter, content string) {
	b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": content}}}})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

func pad4(i int) string { return fmt.Sprintf("%04d", i) }
