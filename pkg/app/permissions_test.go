package app_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/assets"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/lease"
)

// Each pipeline's services, connected as a NATS user of their own with the pipeline's
// assets.Permissions, run their runs to the end, and can neither start another pipeline's
// run nor read its checkpoints.
func TestPipelinePermissions(t *testing.T) {
	dir := t.TempDir()
	perms := map[string]assets.Permissions{}
	for _, p := range []string{"alpha", "beta"} {
		perms[p] = greeting(nil, p, "").Assets().Permissions()
	}
	un := startUsersNATS(t, perms)
	admin := un.connect("admin")
	alpha := un.connect("alpha")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	keys := filepath.Join(dir, "keys")
	if err := app.Init(ctx, greeting(admin, "alpha", keys)); err != nil {
		t.Fatal(err)
	}
	if err := app.Init(ctx, greeting(admin, "beta", keys+"-beta")); err != nil {
		t.Fatal(err)
	}
	running, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(running, greeting(alpha, "alpha", keys)) }()
	if err := app.Start(ctx, admin, "alpha", "r-1", map[string]any{"name": "ada"}); err != nil {
		t.Fatal(err)
	}
	rec, err := app.Wait(ctx, admin, "alpha", "r-1")
	if err != nil || rec.Status != kc.Done || string(rec.Steps["shout"].Output.Inline) != `"ADA!"` {
		t.Fatalf("alpha's r-1: %v, %v", rec, err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if v := un.violations(true); len(v) > 0 {
		t.Errorf("alpha's services were refused: %v", v)
	}

	// What alpha's user may not do: start beta's run, read beta's checkpoints.
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort()
	if err := app.Start(short, alpha, "beta", "r-1", map[string]any{"name": "eve"}); err == nil {
		t.Error("alpha's user started a run of beta")
	}
	if _, err := alpha.KeyValue(short, assets.MustSpace("beta").Bucket(assets.BucketRuns)); err == nil {
		t.Error("alpha's user opened beta's checkpoint bucket")
	}
	if _, err := alpha.Stream(short, assets.StreamRuns); err == nil {
		t.Error("alpha's user looked up the default space's stream")
	}
	// Nor rewrite its own pipeline's keys (a service's key, an approver, the seal): it reads
	// them (alpha's run above checked every record against them), admin writes them.
	sp := assets.MustSpace("alpha")
	keysKV, err := alpha.KeyValue(ctx, sp.Bucket(assets.BucketKeys))
	if err != nil {
		t.Fatal(err)
	}
	registered, err := keysKV.Get(ctx, "service.shout")
	if err != nil {
		t.Fatalf("alpha's user reading its registered key: %v", err)
	}
	for _, key := range []string{"service.shout", "approver.mallory", "seal"} {
		refusedCtx, cancelRefused := context.WithTimeout(ctx, 2*time.Second)
		_, err := keysKV.Put(refusedCtx, key, []byte("UFORGED"))
		cancelRefused()
		if err == nil {
			t.Errorf("alpha's user wrote %s in its keys bucket", key)
		}
	}
	adminKeys, err := admin.KeyValue(ctx, sp.Bucket(assets.BucketKeys))
	if err != nil {
		t.Fatal(err)
	}
	if e, err := adminKeys.Get(ctx, "service.shout"); err != nil || e.Revision() != registered.Revision() {
		t.Errorf("shout's key after alpha's user's writes: %v, %v; want revision %d", e, err, registered.Revision())
	}
	if _, err := adminKeys.Get(ctx, "approver.mallory"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("approver.mallory after alpha's user's write: %v, want no such key", err)
	}
	// Nor replace or remove a durable of its own pipeline: that is admin's.
	for _, d := range []struct{ stream, durable string }{{sp.Stream(assets.StreamSteps), "read"}, {sp.Stream(assets.StreamOutbox), assets.ConsumerOutbox}} {
		refusedCtx, cancelRefused := context.WithTimeout(ctx, 2*time.Second)
		err := alpha.DeleteConsumer(refusedCtx, d.stream, d.durable)
		cancelRefused()
		if err == nil {
			t.Errorf("alpha's user deleted durable %s on %s", d.durable, d.stream)
		}
		if _, err := admin.Consumer(ctx, d.stream, d.durable); err != nil {
			t.Errorf("durable %s on %s: %v", d.durable, d.stream, err)
		}
	}
	// Nor answer "alive" for one of beta's lease owners, which would keep a dead owner's
	// lease from its fast takeover: owner inboxes are under each pipeline's root.
	betaOwner := lease.NewOwner(assets.MustSpace("beta"), "shout")
	sub, err := alpha.Conn().Subscribe(betaOwner.Inbox, func(m *nats.Msg) { _ = m.Respond([]byte("alive")) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := alpha.Conn().Flush(); err != nil { // the server has taken or refused the subscription
		t.Fatal(err)
	}
	if _, err := admin.Conn().Request(betaOwner.Inbox, nil, 10*time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("asking beta's owner inbox %s: %v, want no responders (alpha's user must not subscribe there)", betaOwner.Inbox, err)
	}
	if refused := un.violations(false); len(refused) == 0 {
		t.Error("the server reported no permissions violation")
	}
}

// usersNATS is a nats-server with users: admin, and one user per pipeline holding its
// assets.Permissions (as `cairn permissions` prints them). It records every permissions
// violation its clients are told of.
type usersNATS struct {
	t       *testing.T
	srv     *server.Server
	mu      sync.Mutex
	refused []string
}

func startUsersNATS(t *testing.T, perms map[string]assets.Permissions) *usersNATS {
	t.Helper()
	users := []*server.User{{Username: "admin", Password: "admin"}}
	for name, perm := range perms {
		users = append(users, &server.User{Username: name, Password: name, Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: perm.Publish, Deny: perm.PublishDeny},
			Subscribe: &server.SubjectPermission{Allow: perm.Subscribe},
			Response:  &server.ResponsePermission{MaxMsgs: 1, Expires: time.Minute},
		}})
	}
	srv, err := server.NewServer(&server.Options{ServerName: "users", Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: filepath.Join(t.TempDir(), "nats"), NoSigs: true, NoLog: true, Users: users})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(15 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(srv.Shutdown)
	return &usersNATS{t: t, srv: srv}
}

// connect connects as user: a pipeline's user with its space's inbox prefix.
func (u *usersNATS) connect(user string) jetstream.JetStream {
	u.t.Helper()
	inbox := ""
	if user != "admin" {
		inbox = assets.MustSpace(user).Inbox()
	}
	return u.connectWith(user, inbox)
}

// connectWith connects as user with its replies under inbox ("": the client's default).
func (u *usersNATS) connectWith(user, inbox string) jetstream.JetStream {
	u.t.Helper()
	opts := []nats.Option{nats.UserInfo(user, user), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		u.mu.Lock()
		u.refused = append(u.refused, user+": "+err.Error())
		u.mu.Unlock()
	})}
	if inbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(inbox))
	}
	nc, err := nats.Connect(u.srv.ClientURL(), opts...)
	if err != nil {
		u.t.Fatal(err)
	}
	u.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		u.t.Fatal(err)
	}
	return js
}

// violations are the permissions violations seen so far; reset forgets them.
func (u *usersNATS) violations(reset bool) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	v := u.refused
	if reset {
		u.refused = nil
	}
	return v
}
