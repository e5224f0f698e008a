package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cairnhq/cairn/internal/recon"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// A model that answers about one invoice with another supplier's id: the invoice is parked
// (not filed under the wrong supplier: on main the night ended done, the debit note sent to
// SUP-99) and its answer not memoised; over the park limit the run is handed over; once the model is fixed, resume --after-fix asks the model again about
// that invoice, and the night is filed as its truth says.
func TestAModelAnswerAboutAnotherSupplierIsParkedAndAskedAgainAfterAFix(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newNightOf(t, 8, 3, 0) // one parked of 8 is over the 10% park limit
	target := n.truth.Adjustments[0].InvoiceNo
	var fixed atomic.Bool
	var mu sync.Mutex
	asked := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		doc := req.Messages[len(req.Messages)-1].Content
		no := invoiceNoLine.FindStringSubmatch(doc)[1]
		mu.Lock()
		asked[no]++
		mu.Unlock()
		answer, err := recon.RuleExtractor{}.Extract(r.Context(), no, []byte(doc))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if no == target && !fixed.Load() {
			var inv recon.Invoice
			_ = json.Unmarshal(answer, &inv)
			inv.SupplierID = "SUP-99" // a well-formed id, not the document's
			answer, _ = json.Marshal(inv)
		}
		writeChat(w, string(answer))
	}))
	t.Cleanup(srv.Close)

	n.start("CAIRN_MODEL_URL="+srv.URL+"/v1", "CAIRN_MODEL_NAME=local-model", "CAIRN_MODEL_RPS=1000")
	n.startRun()
	rec := n.waitStatus(runLimit, kc.Done, kc.HandedOver)
	ex := rec.Step("extract")
	if rec.Status != kc.HandedOver || ex.LastError == nil || !strings.Contains(*ex.LastError, "1 of 8 items parked") {
		t.Fatalf("status %s, extract's last error %v; want %s parked and the run handed over at the park limit", rec.Status, ex.LastError, target)
	}
	if rows := n.scalar("ledger.db", `SELECT count(*) FROM ledger_entries`); rows != 0 {
		t.Fatalf("%d ledger rows after the handover at extract, want none", rows)
	}

	fixed.Store(true)
	n.publish(events.RunSubject(runID, events.VerbResume), `{"after_fix":true}`)
	rec = n.waitRecord(runLimit, "generation 1 done or handed over", func(r *kc.Record) bool {
		return r.Generation == 1 && (r.Status == kc.Done || r.Status == kc.HandedOver)
	})
	if rec.Status != kc.Done || rec.Step("extract").ParkedCount != 0 {
		t.Fatalf("after the fix: status %s, extract parked %d; next: %s", rec.Status, rec.Step("extract").ParkedCount, rec.NextAction)
	}
	mu.Lock()
	if asked[target] != 2 {
		t.Errorf("the model was asked %d times about %s, want twice (the wrong answer was not memoised)", asked[target], target)
	}
	for no, k := range asked {
		if no != target && k != 1 {
			t.Errorf("the model was asked %d times about %s, want once (its answer memoised)", k, no)
		}
	}
	mu.Unlock()

	// Filed as the truth says, by generation 1: the ledger, and a debit note to each right
	// supplier (SUP-99 none).
	wantLedger := map[string]int64{}
	for _, a := range n.truth.Adjustments {
		wantLedger[runID+":"+a.KeySuffix] = a.AmountPaise
	}
	if got := n.standing("ledger.db", `SELECT key, amount_paise, reverses FROM ledger_entries`); fmt.Sprint(got) != fmt.Sprint(wantLedger) {
		t.Errorf("standing ledger entries %v, want %v", got, wantLedger)
	}
	var wantKeys []string
	for _, d := range recon.DebitNotes(adjustmentsOf(n.truth.Adjustments)) {
		wantKeys = append(wantKeys, runID+":debit:"+d.SupplierID+":g1")
	}
	wantKeys = append(wantKeys, runID+":report:g1")
	slices.Sort(wantKeys)
	if got := n.mailKeys(); !slices.Equal(got, wantKeys) {
		t.Errorf("mail keys %v, want %v", got, wantKeys)
	}
}
