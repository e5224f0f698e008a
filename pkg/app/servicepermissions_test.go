package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/eventually"
	"github.com/cairnhq/cairn/internal/stepevent"
	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/identity"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/outbox"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/ratelimit"
	"github.com/cairnhq/cairn/pkg/runner"
)

// trioLimit is the rate limit ask declares: the model's calls, booked in trio's own limits
// bucket.
var trioLimit = ratelimit.Limit{Bucket: assets.MustSpace("trio").Bucket(assets.BucketLimits), Key: "model", PerSecond: 1000}

// trio is three steps in a row: read the run's names (an output large enough for the
// artifact store), ask a model for each (memoised, under a rate limit; a refusal hands the
// run over, with a notice to webhook), and send a note per answer through the outbox, each with its withdrawal.
// send's first attempt fails for now after queueing one note, so its retry reads its saga
// records back.
func trio(js jetstream.JetStream, keys, relay, webhook string, sends *atomic.Int32) app.Config {
	read := stepFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
		// Over 1 KiB: the output goes to the artifact store, and ask reads it there.
		return output(append(strings.Split(a.Params.String("names"), ","), strings.Repeat("~", 2048))), nil
	})
	ask := stepFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
		var names []string
		if err := input(ctx, a, "read", &names); err != nil {
			return nil, err
		}
		lim, err := ratelimit.New(ctx, ratelimit.Config{JS: a.JS(), Limit: trioLimit})
		if err != nil {
			return nil, err
		}
		var answers []string
		for _, n := range names {
			if n == "eve" {
				return nil, runner.Permanent(errors.New("the model refuses eve (injected)"))
			}
			if strings.HasPrefix(n, "~") {
				continue
			}
			b, err := a.Memo(ctx, "ask."+n, func(ctx context.Context) ([]byte, error) {
				if _, err := lim.Wait(ctx); err != nil {
					return nil, err
				}
				return []byte(strings.ToUpper(n)), nil
			})
			if err != nil {
				return nil, err
			}
			answers = append(answers, string(b))
		}
		return output(answers), nil
	})
	send := sentFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
		try := sends.Add(1)
		var answers, keys []string
		if err := input(ctx, a, "ask", &answers); err != nil {
			return nil, err
		}
		for i, ans := range answers {
			key, to := a.RunID+":note:"+ans, []string{strings.ToLower(ans) + "@example.com"}
			w := runner.Withdrawable{
				Message:    outbox.Message{Key: key, Kind: "note", From: noteFrom, To: to, Subject: "Note " + ans, Body: "pipeline trio, answer " + ans + "\n"},
				Withdrawal: outbox.Message{Key: key + ":withdraw", From: noteFrom, To: to, Subject: "Withdrawn: note " + ans, Body: "please disregard\n"},
			}
			if err := a.QueueWithdrawable(ctx, w); err != nil {
				return nil, err
			}
			keys = append(keys, key)
			if try == 1 && i == 0 {
				return nil, runner.Temporary(errors.New("the relay's queue went away for now (injected)"))
			}
		}
		return output(keys), nil
	})
	return app.Config{
		JS: js, KeysDir: keys, Heartbeat: 200 * time.Millisecond, Lease: time.Second, TakeoverGap: 100 * time.Millisecond,
		Pipeline: pipeline.Definition{Name: "trio", Input: []string{"names"}, Steps: []pipeline.Step{
			{Name: "read", Kind: pipeline.SourceRead, Recovery: "read again"},
			{Name: "ask", Kind: pipeline.ModelCall, Leased: true, Effects: "a paid call per name", Memo: "<run>.ask.<name>", RateLimit: "TRIO_MODEL_RPS", Recovery: "memoised"},
			{Name: "send", Kind: pipeline.OutsideMessage, Leased: true, Effects: "mail", Key: "<run>:note:<answer>, the outbox's marks",
				Compensation: "the withdrawal <key>:withdraw", Recovery: "queued again under the same keys; the outbox sends each once"},
		}},
		Steps:   map[string]runner.Step{"read": read, "ask": ask, "send": send},
		Limits:  map[string]ratelimit.Limit{"TRIO_MODEL_RPS": trioLimit},
		Notices: app.Notices{Webhook: webhook, Secret: []byte("hook-secret")},
		Outbox: &outbox.SenderConfig{Transport: outbox.SMTPTransport{Addr: relay}, MaxBackoff: 500 * time.Millisecond,
			Allow: outbox.Allow{From: noteFrom, Mail: func(kind, to string) bool {
				return (kind == "note" || kind == "withdraw") && strings.HasSuffix(to, "@example.com")
			}}},
	}
}

// input decodes the output of step, an earlier one, into v.
func input(ctx context.Context, a *runner.Attempt, step string, v any) error {
	b, err := a.Input(ctx, step)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// Every service of a hosted pipeline (each step, the supervisor, the outbox sender, the
// compensator) connects as a NATS user of its own, with Config.ServicePermissions: a run
// ends done, its notes sent once, and its undo sends their withdrawals; another is handed
// over by a step, whose notice reaches the webhook; all with no permissions violation. A step's user is refused what is another's: publishing the event of a step that
// does not follow it, pulling from another step's durable, writing the keys bucket, reading
// another service's replies.
func TestServicePermissions(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	var sends atomic.Int32
	mb, hk := startMailbox(t), startHook(t)
	cfg := trio(nil, keys, mb.addr, hk.URL, &sends)
	services := cfg.Services()
	if want := []string{"read", "ask", "send", app.Supervisor, app.OutboxSender, app.Compensator}; !slices.Equal(services, want) {
		t.Fatalf("trio's services: %v, want %v", services, want)
	}
	perms := map[string]assets.Permissions{}
	for _, s := range services {
		p, err := cfg.ServicePermissions(s)
		if err != nil {
			t.Fatal(err)
		}
		perms["trio-"+s] = p
	}
	un := startUsersNATS(t, perms)
	admin := un.connect("admin")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cfg.JS = admin
	if err := app.Init(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// What `cairn permissions --service` prints is what the host computes without NATS.
	reg, err := app.Registered(ctx, admin, "trio")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range services {
		got, err := reg.ServicePermissions(s)
		if err != nil || !slices.Equal(got.Publish, perms["trio-"+s].Publish) || !slices.Equal(got.PublishDeny, perms["trio-"+s].PublishDeny) ||
			!slices.Equal(got.Subscribe, perms["trio-"+s].Subscribe) {
			t.Errorf("the registration's permissions of %s (%v) differ from the host's:\n%+v\n%+v", s, err, got, perms["trio-"+s])
		}
	}

	sp := assets.MustSpace("trio")
	conns := map[string]jetstream.JetStream{}
	running, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, len(services))
	for _, s := range services {
		conns[s] = un.connectWith("trio-"+s, sp.ServiceInbox(s))
		own := trio(conns[s], keys, mb.addr, hk.URL, &sends)
		go func() { done <- app.Run(running, own, s) }()
	}
	if err := app.Start(ctx, admin, "trio", "r-1", map[string]any{"names": "ada,bob"}); err != nil {
		t.Fatal(err)
	}
	rec, err := app.Wait(ctx, admin, "trio", "r-1")
	if err != nil || rec.Status != kc.Done {
		t.Fatalf("trio's r-1: %+v, %v; want done", rec, err)
	}
	if out := rec.Steps["read"].Output; out == nil || out.Object == "" {
		t.Errorf("read's output %+v is not in the artifact store", out)
	}
	if n := sends.Load(); n != 2 {
		t.Errorf("send ran %d attempts, want 2 (the first failed after queueing a note)", n)
	}
	mailed := func(want ...string) {
		t.Helper()
		outboxSettled(ctx, t, admin, "trio")
		got := mb.counts()
		if len(got) != len(want) || slices.ContainsFunc(want, func(k string) bool { return got[k] != 1 }) {
			t.Errorf("the relay received %v, want each of %v once", got, want)
		}
	}
	mailed("r-1:note:ADA", "r-1:note:BOB")
	// The compensator, under its own user, undoes the run: its notes' withdrawals go out.
	if err := app.Command(ctx, admin, "trio", "r-1", events.VerbUndo, "undo-1", events.Command{}); err != nil {
		t.Fatal(err)
	}
	store, err := kc.Open(ctx, admin, sp.Bucket(assets.BucketRuns))
	if err != nil {
		t.Fatal(err)
	}
	if rec := waitRecord(ctx, t, store, "r-1", "undone", func(r *kc.Record) bool { return r.Status == kc.Undone || r.Status == kc.HandedOver }); rec.Status != kc.Undone {
		t.Fatalf("the undo of r-1: %s, %q; want undone", rec.Status, rec.NextAction)
	}
	mailed("r-1:note:ADA", "r-1:note:BOB", "r-1:note:ADA:withdraw", "r-1:note:BOB:withdraw")
	// ask hands r-2 over (the model refuses a name): its note is written, and its notice
	// reaches the webhook through the outbox.
	if err := app.Start(ctx, admin, "trio", "r-2", map[string]any{"names": "ada,eve"}); err != nil {
		t.Fatal(err)
	}
	if rec := waitRecord(ctx, t, store, "r-2", "handed over", func(r *kc.Record) bool { return r.Status == kc.HandedOver }); rec.Steps["ask"].Status == kc.Verified {
		t.Errorf("r-2's ask: %s, want not verified", rec.Steps["ask"].Status)
	}
	eventually.That(t, time.Minute, "the handover notice of r-2", eventually.True(func() bool { return len(hk.of("handover", "r-2")) > 0 }))
	stop()
	for range services {
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}
	if v := un.violations(true); len(v) > 0 {
		t.Errorf("trio's services were refused under their own users: %v", v)
	}

	// What ask's user may not do: each is refused by the server, which tells the client.
	ask := conns["ask"]
	violated := func(subject string) {
		t.Helper()
		eventually.That(t, time.Minute, "the server's refusal of "+subject, eventually.True(func() bool {
			return slices.ContainsFunc(un.violations(false), func(v string) bool { return strings.Contains(v, subject) })
		}))
	}
	refused := func(what string, err error, subject string) {
		t.Helper()
		if err == nil {
			t.Errorf("ask's user %s", what)
		}
		violated(subject)
	}
	// (a) The event of a step that does not follow it: read's, before it.
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	err = stepevent.Publish(short, ask, sp, "/cairn/ask", "r-2", "read", 1, 1, time.Now())
	cancelShort()
	refused("published the event of step read", err, sp.Step("read", "r-2"))
	steps, err := admin.Stream(ctx, sp.Stream(assets.StreamSteps))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := steps.GetLastMsgForSubject(ctx, sp.Step("read", "r-2")); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("read's event for r-2 is stored (%v): ask's user scheduled a step before it", err)
	}
	// (b) Another step's durable: send's, holding an event admin put there.
	if err := stepevent.Publish(ctx, admin, sp, "/cairn/admin", "r-3", "send", 1, 1, time.Now()); err != nil {
		t.Fatal(err)
	}
	cons, err := ask.Consumer(ctx, sp.Stream(assets.StreamSteps), "send")
	if err != nil {
		t.Fatal(err) // looking a durable up is every service's (the check at start)
	}
	// The pull request itself is refused: the fetch hears nothing and ends at its wait.
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		t.Errorf("ask's user pulled %s from send's durable", m.Subject())
	}
	violated("$JS.API.CONSUMER.MSG.NEXT." + sp.Stream(assets.StreamSteps) + ".send")
	sendDurable, err := admin.Consumer(ctx, sp.Stream(assets.StreamSteps), "send")
	if err != nil {
		t.Fatal(err)
	}
	if info := sendDurable.CachedInfo(); info.NumPending != 1 || info.NumAckPending != 0 {
		t.Errorf("send's durable after ask's pull: %d pending, %d delivered; want its one event pending, none delivered", info.NumPending, info.NumAckPending)
	}
	// (c) The keys bucket: read it may, write it may not.
	kv, err := ask.KeyValue(ctx, sp.Bucket(assets.BucketKeys))
	if err != nil {
		t.Fatal(err)
	}
	before, err := kv.Get(ctx, "service.ask")
	if err != nil {
		t.Fatalf("ask's user reading its registered key: %v", err)
	}
	short, cancelShort = context.WithTimeout(ctx, 2*time.Second)
	_, err = kv.Put(short, "service.ask", []byte("UFORGED"))
	cancelShort()
	refused("wrote the keys bucket", err, "$KV."+sp.Bucket(assets.BucketKeys)+".service.ask")
	adminKeys, err := admin.KeyValue(ctx, sp.Bucket(assets.BucketKeys))
	if err != nil {
		t.Fatal(err)
	}
	if pub, err := identity.Registered(ctx, adminKeys, "ask"); err != nil || pub != string(before.Value()) {
		t.Errorf("ask's registered key after its user's write: %q, %v; want %q", pub, err, before.Value())
	}
	// (d) Another service's replies: send's inbox.
	sub, err := ask.Conn().SubscribeSync(sp.ServiceInbox("send") + ".>")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	violated(sp.ServiceInbox("send"))
	expected := []string{sp.Step("read", "r-2"), "MSG.NEXT." + sp.Stream(assets.StreamSteps) + ".send", "$KV." + sp.Bucket(assets.BucketKeys), sp.ServiceInbox("send")}
	for _, v := range un.violations(false) {
		if !slices.ContainsFunc(expected, func(e string) bool { return strings.Contains(v, e) }) {
			t.Errorf("the server refused what no check above tried: %s", v)
		}
	}
}

// ServicePermissions gives each step its own durable and the events of its own step and the
// steps that wait for it, and nothing of the others'; the memo, limits, saga and outbox only
// to the steps that declare them; an unknown service is an error naming the pipeline's.
func TestServicePermissionsOfEachStep(t *testing.T) {
	reg := app.Registration{Name: "fan", Steps: fan.Steps}
	sp := assets.MustSpace("fan")
	steps := sp.Stream(assets.StreamSteps)
	for _, step := range fan.Names() {
		p, err := reg.ServicePermissions(step)
		if err != nil {
			t.Fatal(err)
		}
		follows := map[string]bool{step: true}
		for _, s := range fan.Names() {
			if slices.Contains(fan.Waits(s), step) {
				follows[s] = true
			}
		}
		for _, other := range fan.Names() {
			if has := slices.Contains(p.Publish, sp.Step(other, "*")); has != follows[other] {
				t.Errorf("%s's user may publish %s's events: %t, want %t", step, other, has, follows[other])
			}
			if has := slices.Contains(p.Publish, "$JS.API.CONSUMER.MSG.NEXT."+steps+"."+other); has != (other == step) {
				t.Errorf("%s's user may pull from %s's durable: %t, want %t", step, other, has, other == step)
			}
		}
		for _, s := range p.Publish {
			if strings.HasPrefix(s, "$KV."+sp.Bucket(assets.BucketKeys)) || strings.HasPrefix(s, "$KV."+sp.Bucket(assets.BucketMemo)) ||
				strings.HasPrefix(s, "$KV."+sp.Bucket(assets.BucketLimits)) || strings.HasPrefix(s, sp.Root()+"saga.") || s == sp.Root()+"outbox.*.*" {
				t.Errorf("%s's user (a compute step, no memo, no limit, no writes) may publish %s", step, s)
			}
		}
		if !slices.Equal(p.Subscribe, []string{sp.ServiceInbox(step) + ".>", sp.Root() + "owner." + step + ".*"}) {
			t.Errorf("%s's user subscribes %v", step, p.Subscribe)
		}
	}
	_, err := reg.ServicePermissions("nope")
	if !errors.Is(err, app.ErrNoService) || !strings.Contains(err.Error(), fmt.Sprint(append(fan.Names(), app.Supervisor, app.OutboxSender, app.Compensator))) {
		t.Errorf("an unknown service: %v, want ErrNoService naming the pipeline's services", err)
	}
	// An Access naming what the pipeline does not have is refused, naming each.
	_, err = assets.Config{Space: sp, Steps: fan.Names()}.ServicePermissions(assets.Access{Service: "a.b", Steps: []string{"nope"},
		Buckets:  map[string]assets.Use{"cairn-nope": assets.UseRead},
		Consumes: assets.Durable{Stream: assets.StreamSteps, Name: "nope"}, Sweeps: []string{"CAIRN_NOPE"}})
	for _, named := range []string{`"a.b"`, `step "nope"`, `bucket "cairn-nope"`, `durable "nope"`, `stream "CAIRN_NOPE"`} {
		if err == nil || !strings.Contains(err.Error(), named) {
			t.Errorf("an Access naming what fan does not have: %v, want an error naming %s", err, named)
		}
	}
	// A rate limit kept in another pipeline's bucket is refused, naming it.
	cfg := trio(nil, "", "", "", nil)
	cfg.Limits = map[string]ratelimit.Limit{"TRIO_MODEL_RPS": {Bucket: assets.BucketLimits, Key: "model", PerSecond: 1}}
	if _, err := cfg.ServicePermissions("ask"); err == nil || !strings.Contains(err.Error(), assets.BucketLimits) {
		t.Errorf("a limit in the night's bucket: %v, want an error naming it", err)
	}
	p, err := trio(nil, "", "", "", nil).ServicePermissions("ask")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"$KV." + assets.MustSpace("trio").Bucket(assets.BucketLimits) + ".model", "$KV." + assets.MustSpace("trio").Bucket(assets.BucketMemo) + ".>"} {
		if !slices.Contains(p.Publish, want) {
			t.Errorf("ask's user may not publish %s: %v", want, p.Publish)
		}
	}
}
