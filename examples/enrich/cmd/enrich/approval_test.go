package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnhq/cairn/examples/enrich"
	"github.com/cairnhq/cairn/examples/enrich/stubapi"
	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/identity"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/outbox"
)

// gated is a job whose services run with an approval gate on upload and notices by
// webhook and mail: what the webhook received (the notices' kinds, by run), the mail folder,
// the services' log.
type gated struct {
	mu      sync.Mutex
	notices []string // the kinds the webhook received
	runs    []string // the run of each
	mailDir string
	log     *os.File
}

// kinds is the kinds of the notices the webhook received about run.
func (g *gated) kinds(run string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for i, k := range g.notices {
		if g.runs[i] == run {
			out = append(out, k)
		}
	}
	return out
}

// gatedJob starts the job's services with CAIRN_APPROVAL_STEPS=upload, the notices'
// settings and env.
func gatedJob(t *testing.T, env ...string) (*job, *gated) {
	j := newJob(t, 10, stubapi.Config{})
	g := &gated{mailDir: filepath.Join(j.dir, "mail")}
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
		g.mu.Lock()
		g.notices, g.runs = append(g.notices, n.Kind), append(g.runs, n.Note.RunID)
		g.mu.Unlock()
	}))
	t.Cleanup(hook.Close)
	env = append([]string{"CAIRN_APPROVAL_STEPS=" + enrich.Upload, "CAIRN_NOTIFY_EMAIL=ops@example.com",
		"CAIRN_NOTIFY_WEBHOOK=" + hook.URL, "CAIRN_NOTIFY_SECRET=s3cret", "CAIRN_MAIL_DIR=" + g.mailDir}, env...)
	// The notices' sender has a key of its own: the administrator's init, with the settings.
	c := initConfig(j.js, j.dir)
	c.Notices = app.Notices{Email: "ops@example.com", Webhook: hook.URL, Secret: []byte("s3cret"), Mail: outbox.FileTransport{Dir: g.mailDir}}
	if err := app.Init(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	var err error
	if g.log, err = os.Create(filepath.Join(j.dir, "services.log")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.log.Close() })
	j.fleet.Env = append(j.fleet.Env, env...)
	if err := j.fleet.Start(t.Context(), g.log); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		j.fleet.Stop(sctx)
	})
	return j, g
}

// The enrichment job's run that nobody approves is handed over at CAIRN_APPROVAL_TIMEOUT,
// with nothing uploaded, and the handover reaches the webhook after the approval notice.
func TestApprovalTimeoutOnUpload(t *testing.T) {
	t.Parallel()
	j, g := gatedJob(t, "CAIRN_APPROVAL_TIMEOUT=2s")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	const run = "run-unanswered"
	if err := app.Start(ctx, j.js, enrich.Pipeline.Name, run, map[string]any{enrich.ParamSource: j.source}); err != nil {
		t.Fatal(err)
	}
	rec, err := app.Wait(ctx, j.js, enrich.Pipeline.Name, run)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != kc.HandedOver || rec.Step(enrich.Upload).Status == kc.Verified {
		t.Fatalf("the unanswered run ended %s, upload %s; want handed over before upload", rec.Status, rec.Step(enrich.Upload).Status)
	}
	if n := j.apis.Counts().Uploads; n != 0 {
		t.Errorf("%d uploads without an approval, want none", n)
	}
	for tick := time.NewTicker(50 * time.Millisecond); !slices.Equal(g.kinds(run), []string{outbox.KindApproval, outbox.KindHandover}); {
		select {
		case <-ctx.Done():
			t.Fatalf("the webhook received %v about %s, want the approval notice, then the handover", g.kinds(run), run)
		case <-tick.C:
		}
	}
}

// The enrichment job's services, real processes configured by the settings every pipeline
// takes (CAIRN_APPROVAL_STEPS=upload, CAIRN_NOTIFY_*, CAIRN_MAIL_DIR): the run waits before
// upload with nothing uploaded, the wait is told by a signed webhook call and by mail, and a
// registered approver's signed approve lets upload write each record once.
func TestApprovalGateOnUpload(t *testing.T) {
	t.Parallel()
	j, g := gatedJob(t)
	var err error
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	const run = "run-gated"
	if err := app.Start(ctx, j.js, enrich.Pipeline.Name, run, map[string]any{enrich.ParamSource: j.source}); err != nil {
		t.Fatal(err)
	}
	store := j.store()
	var rec *kc.Record
	for tick := time.NewTicker(50 * time.Millisecond); ; {
		if rec, _, err = store.Load(ctx, run); err == nil && rec.Status != kc.Running {
			break
		}
		select {
		case <-ctx.Done():
			b, _ := os.ReadFile(g.log.Name())
			t.Fatalf("the run did not stop before upload: %+v, %v\nservices' log:\n%s", rec, err, tail(b, 4000))
		case <-tick.C:
		}
	}
	if rec.Status != kc.WaitingApproval || rec.Approval == nil || rec.Approval.Step != enrich.Upload {
		t.Fatalf("the run is %s with approval %+v, want waiting before upload", rec.Status, rec.Approval)
	}
	if n := j.apis.Counts().Uploads; n != 0 {
		t.Fatalf("%d uploads before the approval, want none", n)
	}
	for tick := time.NewTicker(50 * time.Millisecond); ; {
		mails, _ := filepath.Glob(filepath.Join(g.mailDir, "*.eml"))
		if slices.Equal(g.kinds(run), []string{outbox.KindApproval}) && len(mails) == 1 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the approval notices: webhook calls %v, %d mails; want one approval notice each", g.kinds(run), len(mails))
		case <-tick.C:
		}
	}

	seed, err := identity.NewSeed()
	if err != nil {
		t.Fatal(err)
	}
	cfo, err := identity.NewSigner("cfo", seed)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := j.js.KeyValue(ctx, enrich.Space.Bucket(identity.Bucket))
	if err != nil {
		t.Fatal(err)
	}
	if err := identity.RegisterApprover(ctx, keys, "cfo", cfo.PublicKey()); err != nil {
		t.Fatal(err)
	}
	sig := cfo.Sign(identity.DomainApprove, identity.ApprovalMessage(run, rec.Approval.PlanDigest))
	if err := app.Command(ctx, j.js, enrich.Pipeline.Name, run, events.VerbApprove, "approve-"+run, events.Command{By: "cfo", Sig: &sig}); err != nil {
		t.Fatal(err)
	}
	if rec, err = app.Wait(ctx, j.js, enrich.Pipeline.Name, run); err != nil {
		t.Fatal(err)
	}
	if rec.Status != kc.Done || rec.Approval.By == nil || *rec.Approval.By != "cfo" {
		t.Fatalf("the approved run ended %s, approval %+v; want done, by cfo", rec.Status, rec.Approval)
	}
	j.checkOnce(rec, nil)
}

// A setting the notices need is checked when the job starts, naming the variable: mail
// notices with no relay and no folder.
func TestNoticeSettingsCheckedAtStart(t *testing.T) {
	for k, v := range map[string]string{"ENRICH_PROFILE_URL": "http://p", "ENRICH_GEO_URL": "http://g", "ENRICH_RISK_URL": "http://r",
		"ENRICH_UPLOAD_URL": "http://u", "CAIRN_NOTIFY_EMAIL": "ops@example.com", "CAIRN_NOTIFY_WEBHOOK": "http://127.0.0.1:1/hook"} {
		t.Setenv(k, v)
	}
	_, err := load()
	for _, want := range []string{"CAIRN_NOTIFY_EMAIL needs CAIRN_SMTP_ADDR", "CAIRN_NOTIFY_SECRET must be set"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("load: %v; want an error saying %q", err, want)
		}
	}
}
