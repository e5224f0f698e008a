package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/outbox"
	"github.com/cairnhq/cairn/pkg/runner"
)

// A handover notifies people once: a mail to CAIRN_NOTIFY_EMAIL and a POST of the note to
// CAIRN_NOTIFY_WEBHOOK, signed with CAIRN_NOTIFY_SECRET; the resume and the rest of the night
// notify nobody again.
func TestHandoverNotifiesOnce(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	var mu sync.Mutex
	type call struct {
		sigOK bool
		body  struct {
			Kind string              `json:"kind"`
			Note runner.HandoverNote `json:"note"`
		}
	}
	var calls []call
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var c call
		c.sigOK = outbox.VerifyWebhook([]byte("s3cret"), r.Header, b, time.Now(), 5*time.Minute) == nil
		_ = json.Unmarshal(b, &c.body)
		mu.Lock()
		calls = append(calls, c)
		mu.Unlock()
	}))
	t.Cleanup(hook.Close)

	n := newNight(t, 0)
	n.start("CAIRN_FAULTS=update-stock.before-write.5=error:unknown@once", "CAIRN_NOTIFY_EMAIL=ops@cairn.local",
		"CAIRN_NOTIFY_WEBHOOK="+hook.URL+"/cairn", "CAIRN_NOTIFY_SECRET=s3cret")
	n.startRun()
	rec := n.waitStatus(runLimit, kvcheckpoint.HandedOver)
	note := *rec.Handover
	got := func() []call { mu.Lock(); defer mu.Unlock(); return slices.Clone(calls) }
	if !poll(runLimit, func() bool { return len(got()) == 1 && slices.Contains(n.mailKeys(), note+":mail") }) {
		t.Fatalf("webhook calls %+v, mail %v: want one of each for %s", got(), n.mailKeys(), note)
	}
	c := got()[0]
	if !c.sigOK || c.body.Kind != "handover" || c.body.Note.ID != note || c.body.Note.Step != "update-stock" || !strings.Contains(c.body.Note.Error, "unknown") {
		t.Fatalf("webhook call %+v", c)
	}
	if body := n.mailByKey(note + ":mail"); !strings.Contains(body, "To: <ops@cairn.local>") && !strings.Contains(body, "To: ops@cairn.local") {
		t.Errorf("notification mail:\n%s", body)
	}
	if out, code := n.cli("resume", runID, "--wait"); code != 0 {
		t.Fatalf("cairn resume (exit %d):\n%s", code, out)
	}
	n.assertTruthExtra(1) // the notification mail besides the notes and the report
	if len(got()) != 1 {
		t.Errorf("webhook calls after the resume: %d, want still 1", len(got()))
	}
}
