package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnhq/cairn/examples/enrich"
	"github.com/cairnhq/cairn/examples/enrich/records"
	"github.com/cairnhq/cairn/examples/enrich/stubapi"
	"github.com/cairnhq/cairn/internal/apptest"
	"github.com/cairnhq/cairn/internal/eventually"
	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/ratelimit"
)

// The enrichment job, hosted with notices by webhook, from the operator's CLI: cairn start
// --pipeline enrich runs its records to done, the same records under another run id exit 1
// naming the first run, cairn status shows the run's own input (its source), and a run whose
// source cannot be read is handed over, its note reaching the webhook.
func TestEnrichFromTheCLI(t *testing.T) {
	t.Parallel()
	js := natstest.JetStream(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	apis, err := stubapi.Start(stubapi.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(apis.Close)
	source := filepath.Join(dir, "records.jsonl")
	if _, err := records.Generate(source, 5, 1); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	handovers := map[string]int{} // run → handover notices received
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n struct {
			Kind string `json:"kind"`
			Note struct {
				RunID string `json:"run_id"`
			} `json:"note"`
		}
		b, _ := io.ReadAll(r.Body)
		if json.Unmarshal(b, &n) != nil {
			http.Error(w, "not a notice", http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if n.Kind == "handover" {
			handovers[n.Note.RunID]++
		}
	}))
	t.Cleanup(hook.Close)

	keys := filepath.Join(dir, "keys")
	ec := enrich.Config{APIs: records.Client{ProfileURL: apis.ProfileURL, GeoURL: apis.GeoURL, RiskURL: apis.RiskURL, HTTP: &http.Client{}},
		UploadURL: apis.UploadURL, CallTimeout: 2 * time.Second}
	job, err := enrich.Job(ec)
	if err != nil {
		t.Fatal(err)
	}
	cfg := app.Config{JS: js, Job: job, KeysDir: keys,
		Limits:    map[string]ratelimit.Limit{enrich.RateSetting: enrich.GeoLimit(15)},
		Heartbeat: 200 * time.Millisecond, Lease: time.Second, TakeoverGap: 100 * time.Millisecond, LoopGuard: 2,
		Notices: app.Notices{Webhook: hook.URL, Secret: []byte("s3cret")}}
	defer apptest.Host(ctx, t, cfg)()
	cli := hostedCLI(ctx, t, js.Conn().ConnectedUrl(), dir)

	if out, code := cli("start", "--pipeline", "enrich", "--input", "source="+source, "--run-id", "r-1", "--wait"); code != 0 || !strings.Contains(out, "started r-1") {
		t.Fatalf("cairn start --pipeline enrich r-1: exit %d\n%s", code, out)
	}
	if c := apis.Counts(); c.Uploads == 0 {
		t.Errorf("r-1 uploaded nothing: %+v", c)
	}
	if out, code := cli("start", "--pipeline", "enrich", "--input", "source="+source, "--run-id", "r-2"); code != 1 || !strings.Contains(out, "start of r-2 refused: run r-1 has this input already") {
		t.Errorf("the same records as r-2: exit %d, want 1 naming r-1:\n%s", code, out)
	}
	if out, code := cli("status", "--pipeline", "enrich", "r-1"); code != 0 || !strings.Contains(out, "params     source "+source) {
		t.Errorf("cairn status --pipeline enrich r-1: exit %d, want the run's source:\n%s", code, out)
	}
	missing := filepath.Join(dir, "no-such-records.jsonl")
	out, code := cli("start", "--pipeline", "enrich", "--input", "source="+missing, "--run-id", "r-3", "--wait")
	if code == 0 {
		t.Fatalf("a run of a missing records file ended well:\n%s", out)
	}
	eventually.That(t, time.Minute, "r-3's handover notice at the webhook", func() error {
		mu.Lock()
		n := handovers["r-3"]
		mu.Unlock()
		if n != 1 {
			return fmt.Errorf("%d notices, want 1 (cairn start said, exit %d:\n%s)", n, code, out)
		}
		return nil
	})
}
