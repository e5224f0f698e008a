package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/apptest"
	"github.com/cairnhq/cairn/internal/eventually"
	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/identity"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/outbox"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/runner"
)

// notice is one call the webhook received: the kind and the note of a handover or a wait.
type notice struct {
	Kind string              `json:"kind"`
	Note runner.HandoverNote `json:"note"`
}

// hook is a real HTTP server on loopback standing for the operators' webhook: it keeps
// every notice it receives with a signature header.
type hook struct {
	*httptest.Server
	mu      sync.Mutex
	notices []notice
	signed  int
}

func startHook(t *testing.T) *hook {
	t.Helper()
	h := &hook{}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var n notice
		if err == nil {
			err = json.Unmarshal(body, &n)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		h.notices = append(h.notices, n)
		for name := range r.Header {
			if strings.Contains(strings.ToLower(name), "signature") {
				h.signed++
				break
			}
		}
	}))
	t.Cleanup(h.Close)
	return h
}

// of is the notices of kind about run.
func (h *hook) of(kind, run string) []notice {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []notice
	for _, n := range h.notices {
		if n.Kind == kind && n.Note.RunID == run {
			out = append(out, n)
		}
	}
	return out
}

// planned is a step that says what it will do before it does it: it sends the run's items
// (here: counts its runs) and plans the same list.
type planned struct{ runs atomic.Int32 }

func (p *planned) Plan(ctx context.Context, a *runner.Attempt) ([]byte, error) {
	return a.Input(ctx, "items")
}

func (p *planned) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	p.runs.Add(1)
	b, err := a.Input(ctx, "items")
	if err != nil {
		return nil, err
	}
	return &runner.Result{Output: b, Items: 1}, nil
}

// gated is a pipeline whose step send waits for a person's approval, with notices by mail
// (through relay) and by webhook, and no outbox of its own.
func gated(js jetstream.JetStream, name, keys, relay, webhook string, timeout time.Duration, send *planned) app.Config {
	read := stepFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
		return output(strings.Split(a.Params.String("items"), ",")), nil
	})
	return app.Config{
		JS: js, KeysDir: keys, Heartbeat: 200 * time.Millisecond, Lease: time.Second, TakeoverGap: 100 * time.Millisecond,
		Pipeline: pipeline.Definition{Name: name, Input: []string{"items"}, Steps: []pipeline.Step{
			{Name: "items", Kind: pipeline.SourceRead, Recovery: "read again"},
			{Name: "send", Kind: pipeline.Compute, Leased: true, Recovery: "computed again"},
		}},
		Steps:         map[string]runner.Step{"items": read, "send": send},
		ApprovalSteps: []string{"send"}, ApprovalTimeout: timeout,
		Notices: app.Notices{Email: "ops@example.com", Webhook: webhook, Secret: []byte("hook-secret"),
			From: "Cairn <cairn@example.com>", Mail: outbox.SMTPTransport{Addr: relay}},
	}
}

// approveAs registers a new approver by in pipeline name's keys and sends its signed
// approve of the plan rec waits on.
func approveAs(ctx context.Context, t *testing.T, js jetstream.JetStream, name, by string, rec *kc.Record) {
	t.Helper()
	seed, err := identity.NewSeed()
	if err != nil {
		t.Fatal(err)
	}
	sg, err := identity.NewSigner(by, seed)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := js.KeyValue(ctx, assets.MustSpace(name).Bucket(identity.Bucket))
	if err != nil {
		t.Fatal(err)
	}
	if err := identity.RegisterApprover(ctx, keys, by, sg.PublicKey()); err != nil {
		t.Fatal(err)
	}
	sig := sg.Sign(identity.DomainApprove, identity.ApprovalMessage(rec.RunID, rec.Approval.PlanDigest))
	if err := app.Command(ctx, js, name, rec.RunID, events.VerbApprove, "approve-"+rec.RunID+"-"+by, events.Command{By: by, Sig: &sig}); err != nil {
		t.Fatal(err)
	}
}

// A hosted pipeline with an approval gate on a step and no outbox of its own: the run waits
// before the step, the wait is told by webhook (signed) and by mail, an unsigned approve is
// refused, and an approve signed by a registered approver lets the step run, once, and the
// run finish.
func TestApprovalGateOnAHostedPipeline(t *testing.T) {
	js := natsFor(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	mb, wh, send := startMailbox(t), startHook(t), &planned{}
	cfg := gated(js, "gate", filepath.Join(t.TempDir(), "keys"), mb.addr, wh.URL, time.Hour, send)
	if !slices.Contains(cfg.Services(), app.OutboxSender) {
		t.Fatalf("services %v: a pipeline with notices runs an outbox sender", cfg.Services())
	}
	apptest.Host(ctx, t, cfg)
	if err := app.Start(ctx, js, "gate", "r-1", map[string]any{"items": "a,b"}); err != nil {
		t.Fatal(err)
	}
	store, err := kc.Open(ctx, js, assets.MustSpace("gate").Bucket(assets.BucketRuns))
	if err != nil {
		t.Fatal(err)
	}
	var rec *kc.Record
	eventually.That(t, time.Minute, "r-1 waits for approval", eventually.True(func() bool {
		rec, _, err = store.Load(ctx, "r-1")
		return err == nil && rec.Status == kc.WaitingApproval
	}))
	if rec.Approval == nil || rec.Approval.Step != "send" || rec.Approval.PlanDigest == "" {
		t.Fatalf("r-1 waits with approval %+v, want send's plan", rec.Approval)
	}
	eventually.That(t, time.Minute, "the approval notice by webhook", eventually.True(func() bool { return len(wh.of(outbox.KindApproval, "r-1")) == 1 }))
	if n := wh.of(outbox.KindApproval, "r-1")[0]; n.Note.Step != "send" {
		t.Errorf("the approval notice names step %q, want send", n.Note.Step)
	}
	eventually.That(t, time.Minute, "the approval notice by mail", eventually.True(func() bool {
		for k := range mb.counts() {
			if strings.HasPrefix(k, "r-1") && strings.HasSuffix(k, ":mail") {
				return true
			}
		}
		return false
	}))
	wh.mu.Lock()
	signed := wh.signed
	wh.mu.Unlock()
	if signed == 0 {
		t.Error("the webhook's calls carry no signature header")
	}
	if n := send.runs.Load(); n != 0 {
		t.Fatalf("send ran %d times before its approval", n)
	}

	// An approve without a signature is refused; one by the registered approver is taken.
	if err := app.Command(ctx, js, "gate", "r-1", events.VerbApprove, "approve-unsigned", events.Command{By: "cfo"}); err != nil {
		t.Fatal(err)
	}
	approveAs(ctx, t, js, "gate", "cfo", rec)
	end, err := app.Wait(ctx, js, "gate", "r-1")
	if err != nil {
		t.Fatal(err)
	}
	if end.Status != kc.Done || end.Approval == nil || end.Approval.By == nil || *end.Approval.By != "cfo" {
		t.Fatalf("r-1 ended %s with approval %+v, want done, approved by cfo", end.Status, end.Approval)
	}
	if n := send.runs.Load(); n != 1 {
		t.Errorf("send ran %d times, want once", n)
	}
	if n := len(wh.of(outbox.KindHandover, "r-1")); n != 0 {
		t.Errorf("r-1 was handed over %d times", n)
	}
}

// A hosted pipeline's run nobody approves is handed over at the approval timeout, and the
// handover reaches the webhook and the mailbox; the gated step never ran.
func TestApprovalTimeoutHandsOverAndNotifies(t *testing.T) {
	js := natsFor(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	mb, wh, send := startMailbox(t), startHook(t), &planned{}
	cfg := gated(js, "gateout", filepath.Join(t.TempDir(), "keys"), mb.addr, wh.URL, 2*time.Second, send)
	apptest.Host(ctx, t, cfg)
	if err := app.Start(ctx, js, "gateout", "r-1", map[string]any{"items": "a"}); err != nil {
		t.Fatal(err)
	}
	end, err := app.Wait(ctx, js, "gateout", "r-1")
	if err != nil {
		t.Fatal(err)
	}
	if end.Status != kc.HandedOver {
		t.Fatalf("r-1 ended %s, want handed over at the approval timeout", end.Status)
	}
	eventually.That(t, time.Minute, "the handover notice by webhook", eventually.True(func() bool { return len(wh.of(outbox.KindHandover, "r-1")) == 1 }))
	if n := wh.of(outbox.KindHandover, "r-1")[0]; !strings.Contains(n.Note.Error, "CAIRN_APPROVAL_TIMEOUT") ||
		!strings.Contains(n.Note.NextAction, "cairn resume r-1 --pipeline gateout") {
		t.Errorf("the handover notice says %q, next %q; want the approval timeout, and the commands naming the pipeline", n.Note.Error, n.Note.NextAction)
	}
	eventually.That(t, time.Minute, "the handover and approval notices by mail", eventually.True(func() bool { return len(mb.counts()) == 2 }))
	for k, n := range mb.counts() {
		if n != 1 {
			t.Errorf("mail %s received %d times, want once", k, n)
		}
	}
	if n := send.runs.Load(); n != 0 {
		t.Errorf("send ran %d times without approval", n)
	}
}

// Notices and approval gates that cannot work are refused when the pipeline starts, naming the
// setting: a gate on a step that cannot plan, or on no step; a webhook with no secret; mail
// notices with nothing to deliver them.
func TestNoticesAndGatesCheckedAtStart(t *testing.T) {
	js := natsFor(t)
	base := gated(js, "checks", t.TempDir(), "127.0.0.1:1", "http://127.0.0.1:1/hook", time.Hour, &planned{})
	for want, change := range map[string]func(c *app.Config){
		`"items", which cannot wait for approval: it takes no lease`: func(c *app.Config) { c.ApprovalSteps = []string{"items"} },
		`"nosuch", which is not a step`:                              func(c *app.Config) { c.ApprovalSteps = []string{"nosuch"} },
		`"send", which cannot wait for approval: its implementation is no runner.Planner`: func(c *app.Config) {
			c.Steps = map[string]runner.Step{"items": c.Steps["items"], "send": stepFunc(func(context.Context, *runner.Attempt) (*runner.Result, error) { return output(nil), nil })}
		},
		"CAIRN_NOTIFY_SECRET must be set":      func(c *app.Config) { c.Notices.Secret = nil },
		"CAIRN_NOTIFY_EMAIL: nothing delivers": func(c *app.Config) { c.Notices.Mail = nil },
		"CAIRN_NOTIFY_WEBHOOK \"ftp://x\"":     func(c *app.Config) { c.Notices.Webhook = "ftp://x" },
	} {
		c := base
		c.Notices.Secret = slices.Clone(base.Notices.Secret)
		change(&c)
		err := app.Run(t.Context(), c)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Run: %v; want an error saying %s", err, want)
		}
	}
}

// checkedFunc is a step whose verification finds an anomaly in an output that holds an
// item beginning with "~" (runner.Anomaly): the step is right, the evidence unclear.
type checkedFunc func(ctx context.Context, a *runner.Attempt) (*runner.Result, error)

func (f checkedFunc) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	return f(ctx, a)
}

func (checkedFunc) Verify(_ context.Context, _ *runner.Attempt, r *runner.Result) error {
	var items []string
	if err := json.Unmarshal(r.Output, &items); err != nil {
		return err
	}
	for _, it := range items {
		if strings.HasPrefix(it, "~") {
			return runner.Anomaly(fmt.Errorf("item %s reads only approximately", it))
		}
	}
	return nil
}

// evidenced is a pipeline whose source parks the items that begin with "?" and finds an
// anomaly in those that begin with "~", and whose last step, send, cannot be undone: it
// counts its runs.
func evidenced(js jetstream.JetStream, keys, webhook string, send *atomic.Int32) app.Config {
	read := checkedFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
		var ok []string
		var parked []kc.Parked
		items := strings.Split(a.Params.String("items"), ",")
		for _, it := range items {
			if strings.HasPrefix(it, "?") {
				parked = append(parked, kc.Parked{Item: it, Reason: "unreadable"})
			} else {
				ok = append(ok, it)
			}
		}
		res := output(ok)
		res.Parked, res.Items = parked, len(items)
		return res, nil
	})
	sendStep := sentFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
		send.Add(1)
		return output([]string{a.RunID + ":sent"}), nil
	})
	return app.Config{
		JS: js, KeysDir: keys, Heartbeat: 200 * time.Millisecond, Lease: time.Second, TakeoverGap: 100 * time.Millisecond,
		Pipeline: pipeline.Definition{Name: "evidence", Input: []string{"items"}, Steps: []pipeline.Step{
			{Name: "items", Kind: pipeline.SourceRead, Recovery: "read again"},
			{Name: "send", Kind: pipeline.OutsideMessage, Leased: true, Irreversible: true, Effects: "a message",
				Key: "<run>", Recovery: "the receiver keeps the first"},
		}},
		Steps:   map[string]runner.Step{"items": read, "send": sendStep},
		Notices: app.Notices{Webhook: webhook, Secret: []byte("hook-secret")},
	}
}

// A step that cannot be undone does not start while the run's evidence is unclear: a run
// whose source parked an item waits before it, saying why (its next action and the approval
// notice name the parked item's step), and goes on once a registered approver approves; a
// run with clean evidence goes straight through.
func TestIrreversibleStepWaitsOnUnclearEvidence(t *testing.T) {
	js := natsFor(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	wh := startHook(t)
	var sends atomic.Int32
	cfg := evidenced(js, filepath.Join(t.TempDir(), "keys"), wh.URL, &sends)
	apptest.Host(ctx, t, cfg)
	var clean, unclear []string
	for i := range 20 {
		clean = append(clean, fmt.Sprintf("i%d", i))
		unclear = append(unclear, fmt.Sprintf("u%d", i))
	}
	unclear[7] = "?u7"
	if err := app.Start(ctx, js, "evidence", "clean", map[string]any{"items": strings.Join(clean, ",")}); err != nil {
		t.Fatal(err)
	}
	rec, err := app.Wait(ctx, js, "evidence", "clean")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != kc.Done || rec.Approval != nil || sends.Load() != 1 {
		t.Fatalf("the clean run ended %s, approval %+v, send ran %d times; want done straight through, once", rec.Status, rec.Approval, sends.Load())
	}

	if err := app.Start(ctx, js, "evidence", "unclear", map[string]any{"items": strings.Join(unclear, ",")}); err != nil {
		t.Fatal(err)
	}
	store, err := kc.Open(ctx, js, assets.MustSpace("evidence").Bucket(assets.BucketRuns))
	if err != nil {
		t.Fatal(err)
	}
	eventually.That(t, time.Minute, "the unclear run waits before send", eventually.True(func() bool {
		rec, _, err = store.Load(ctx, "unclear")
		return err == nil && rec.Status == kc.WaitingApproval
	}))
	if rec.Approval == nil || rec.Approval.Step != "send" || !strings.Contains(rec.NextAction, "1 item parked at items") ||
		!strings.Contains(rec.NextAction, "cairn approve unclear --pipeline evidence") {
		t.Fatalf("the unclear run waits with approval %+v and next action %q; want send, naming the item parked at items", rec.Approval, rec.NextAction)
	}
	if n := sends.Load(); n != 1 {
		t.Fatalf("send ran %d times in all before the approval, want 1 (the clean run's)", n)
	}
	eventually.That(t, time.Minute, "the approval notice", eventually.True(func() bool { return len(wh.of(outbox.KindApproval, "unclear")) == 1 }))
	if n := wh.of(outbox.KindApproval, "unclear")[0]; !strings.Contains(n.Note.Error, "evidence is unclear before send") {
		t.Errorf("the approval notice says %q, want why", n.Note.Error)
	}
	approveAs(ctx, t, js, "evidence", "cfo", rec)
	if rec, err = app.Wait(ctx, js, "evidence", "unclear"); err != nil {
		t.Fatal(err)
	}
	if rec.Status != kc.Done || sends.Load() != 2 {
		t.Fatalf("the approved run ended %s, send ran %d times in all; want done, twice", rec.Status, sends.Load())
	}

	// An anomaly the source's verification found: the source step is verified, and send waits.
	if err := app.Start(ctx, js, "evidence", "odd", map[string]any{"items": "a,~b,c"}); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, time.Minute, "the odd run waits before send", eventually.True(func() bool {
		rec, _, err = store.Load(ctx, "odd")
		return err == nil && rec.Status == kc.WaitingApproval
	}))
	if st := rec.Step("items"); st.Status != kc.Verified || !strings.Contains(rec.NextAction, "items its verification found an anomaly: item ~b reads only approximately") {
		t.Fatalf("the odd run: items %s, next action %q; want items verified and the anomaly named", st.Status, rec.NextAction)
	}
	if n := sends.Load(); n != 2 {
		t.Errorf("send ran %d times in all, want 2: not for the odd run before an approval", n)
	}
}
