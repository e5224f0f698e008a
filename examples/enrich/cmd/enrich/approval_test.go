package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
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

// The enrichment job's services, real processes configured by the settings every pipeline
// takes (CAIRN_APPROVAL_STEPS=upload, CAIRN_NOTIFY_*, CAIRN_MAIL_DIR): the run waits before
// upload with nothing uploaded, the wait is told by a signed webhook call and by mail, and a
// registered approver's signed approve lets upload write each record once.
func TestApprovalGateOnUpload(t *testing.T) {
	t.Parallel()
	j := newJob(t, 10, stubapi.Config{})
	var mu sync.Mutex
	var notices []string // the kinds the webhook received
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n struct {
			Kind string `json:"kind"`
		}
		b, _ := io.ReadAll(r.Body)
		if json.Unmarshal(b, &n) != nil {
			http.Error(w, "not a notice", http.StatusBadRequest)
			return
		}
		mu.Lock()
		notices = append(notices, n.Kind)
		mu.Unlock()
	}))
	t.Cleanup(hook.Close)
	mailDir := filepath.Join(j.dir, "mail")
	env := []string{"CAIRN_APPROVAL_STEPS=" + enrich.Upload, "CAIRN_NOTIFY_EMAIL=ops@example.com",
		"CAIRN_NOTIFY_WEBHOOK=" + hook.URL, "CAIRN_NOTIFY_SECRET=s3cret", "CAIRN_MAIL_DIR=" + mailDir}
	// The notices' sender has a key of its own: the administrator's init, with the settings.
	c := initConfig(j.js, j.dir)
	c.Notices = app.Notices{Email: "ops@example.com", Webhook: hook.URL, Secret: []byte("s3cret"), Mail: outbox.FileTransport{Dir: mailDir}}
	if err := app.Init(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(j.dir, "services.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	j.fleet.Env = append(j.fleet.Env, env...)
	if err := j.fleet.Start(t.Context(), log); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		j.fleet.Stop(sctx)
	})
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
			b, _ := os.ReadFile(log.Name())
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
		mu.Lock()
		got := len(notices)
		mu.Unlock()
		mails, _ := filepath.Glob(filepath.Join(mailDir, "*.eml"))
		if got == 1 && len(mails) == 1 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the approval notices: %d webhook calls, %d mails; want one each", got, len(mails))
		case <-tick.C:
		}
	}
	mu.Lock()
	if notices[0] != outbox.KindApproval {
		t.Errorf("the webhook received a %q notice, want %q", notices[0], outbox.KindApproval)
	}
	mu.Unlock()

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
	sig := cfo.Sign(identity.DomainApprove, events.ApprovalMessage(run, rec.Approval.PlanDigest))
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
