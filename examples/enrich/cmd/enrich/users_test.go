package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/examples/enrich"
	"github.com/cairnhq/cairn/examples/enrich/records"
	"github.com/cairnhq/cairn/examples/enrich/stubapi"
	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/identity"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/ratelimit"
)

// Each of the job's services runs as a process of its own, connected as a NATS user of its
// own (enrich-<service>) with the permissions `cairn permissions --pipeline enrich --service`
// prints: a run ends done, each record uploaded once, and its undo (the compensator's work)
// reverses every upload, with no permissions violation reported by the server. A step's user
// is refused what is another's: geo may neither schedule upload, which does not follow it,
// nor write the pipeline's keys bucket.
func TestEachServiceAsItsOwnUser(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// The host's configuration as `enrich service` builds it (config) but for the steps'
	// code, which the permissions do not depend on.
	host := initConfig(nil, dir)
	host.Limits = map[string]ratelimit.Limit{enrich.RateSetting: enrich.GeoLimit(15)}
	services := host.Services()
	if want := append(enrich.Pipeline.Names(), app.Supervisor, app.Compensator); !slices.Equal(services, want) {
		t.Fatalf("the job's services: %v, want %v", services, want)
	}
	perms := map[string]assets.Permissions{}
	for _, s := range services {
		p, err := host.ServicePermissions(s)
		if err != nil {
			t.Fatal(err)
		}
		perms["enrich-"+s] = p
	}
	srv := startServiceUsers(t, perms)
	admin := srv.connect("admin", "", "")

	upload := filepath.Join(dir, "upload")
	if err := os.MkdirAll(upload, 0o755); err != nil {
		t.Fatal(err)
	}
	apis, err := stubapi.Start(stubapi.Config{Dir: upload})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(apis.Close)
	source := filepath.Join(dir, "records.jsonl")
	recs, err := records.Generate(source, 10, 1)
	if err != nil {
		t.Fatal(err)
	}
	j := &job{t: t, dir: dir, js: admin, apis: apis, source: source, records: recs}
	env := []string{
		"ENRICH_AS_MAIN=1",
		"ENRICH_DATA_DIR=" + dir,
		"ENRICH_PROFILE_URL=" + apis.ProfileURL, "ENRICH_GEO_URL=" + apis.GeoURL, "ENRICH_RISK_URL=" + apis.RiskURL,
		"ENRICH_UPLOAD_URL=" + apis.UploadURL,
		"ENRICH_CALL_TIMEOUT=2s", "ENRICH_GEO_RPS=15",
		"CAIRN_LEASE=3s", "CAIRN_HEARTBEAT=1s", "CAIRN_ACK_WAIT=3s",
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	// The administrator's init, as admin: the assets, then the registration with the steps.
	initCmd := exec.CommandContext(ctx, os.Args[0], "init")
	initCmd.Env = append(os.Environ(), append(env, "CAIRN_NATS_URL="+srv.url("admin"))...)
	if out, err := initCmd.CombinedOutput(); err != nil {
		t.Fatalf("enrich init as admin: %v\n%s", err, out)
	}
	// The users are what `cairn permissions --service` prints from the registration.
	reg, err := app.Registered(ctx, admin, enrich.Pipeline.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range services {
		got, err := reg.ServicePermissions(s)
		if err != nil {
			t.Fatal(err)
		}
		want := perms["enrich-"+s]
		for _, l := range []struct {
			name      string
			got, want []string
		}{{"publish", got.Publish, want.Publish}, {"publish deny", got.PublishDeny, want.PublishDeny}, {"subscribe", got.Subscribe, want.Subscribe}} {
			if missing, extra := differ(l.got, l.want); len(missing)+len(extra) > 0 {
				t.Errorf("the registration's %s permissions of %s differ from the host's: it lacks %v and adds %v", l.name, s, missing, extra)
			}
		}
	}

	// One process per service, each connected as its own user, restarted if it dies.
	fleets := map[string]*Fleet{}
	for _, s := range services {
		log, err := os.Create(filepath.Join(dir, "service-"+s+".log"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { log.Close() })
		f := &Fleet{Bin: os.Args[0], Env: append(slices.Clone(env), "CAIRN_NATS_URL="+srv.url("enrich-"+s))}
		if err := f.Start(t.Context(), log, s); err != nil {
			t.Fatal(err)
		}
		fleets[s] = f
	}
	stopAll := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for _, f := range fleets {
			f.Stop(sctx)
		}
	}
	t.Cleanup(stopAll)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, s := range services {
			b, _ := os.ReadFile(filepath.Join(dir, "service-"+s+".log"))
			t.Logf("%s's log:\n%s", s, tail(b, 2000))
		}
	})

	const run = "run-users"
	if err := app.Start(ctx, admin, enrich.Pipeline.Name, run, map[string]any{enrich.ParamSource: source}); err != nil {
		t.Fatal(err)
	}
	// Ten records take seconds: a service refused what it needs holds the run up.
	waitCtx, cancelWait := context.WithTimeout(ctx, time.Minute)
	rec, err := app.Wait(waitCtx, admin, enrich.Pipeline.Name, run)
	cancelWait()
	if err != nil {
		var status kc.Status
		steps := map[string]kc.StepStatus{}
		if rec != nil {
			status = rec.Status
			for name, st := range rec.Steps {
				steps[name] = st.Status
			}
		}
		t.Fatalf("%v: the run is %q, its steps %v; the server refused: %v", err, status, steps, srv.violations())
	}
	j.checkOnce(rec, nil)
	// The compensator's part: the run's undo reverses every upload.
	ids := j.uploadedIDs(run)
	j.undo(run, "undo-all", nil)
	j.settled(run, "undo-all", kc.Undone)
	if got, rows := j.reversed(run); !slices.Equal(got, ids) || rows != len(ids) {
		t.Errorf("after the undo: %v reversed of %d rows, want every upload %v", got, rows, ids)
	}
	stopAll()
	for _, s := range services {
		if n := fleets[s].Restarts(); n != 0 {
			t.Errorf("%s's process died %d times", s, n)
		}
	}
	if v := srv.violations(); len(v) > 0 {
		t.Fatalf("the server refused the services under their own users: %v", v)
	}

	// What geo's user may not do, with no service running to move the streams on.
	sp := enrich.Space
	geo := srv.connect("enrich-geo", "probe-geo", sp.ServiceInbox(enrich.Geo))
	refused := func(subject string) {
		t.Helper()
		wait, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for !slices.ContainsFunc(srv.violations(), func(v violation) bool { return v.user == "enrich-geo" && v.subject == subject }) {
			select {
			case <-wait.Done():
				t.Fatalf("the server did not report refusing %s to enrich-geo: %v", subject, srv.violations())
			case <-tick.C:
			}
		}
	}
	// (a) The event of upload, which does not follow geo (validate does).
	steps, err := admin.Stream(ctx, sp.Stream(assets.StreamSteps))
	if err != nil {
		t.Fatal(err)
	}
	before, err := steps.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	_, err = geo.Publish(short, sp.Step(enrich.Upload, "r-x"), []byte("{}")) // refused by subject, whatever it carries
	cancelShort()
	if err == nil {
		t.Error("geo's user published upload's event: the stream acked it")
	}
	refused(sp.Step(enrich.Upload, "r-x"))
	after, err := steps.Info(ctx, jetstream.WithSubjectFilter(sp.Step(enrich.Upload, "r-x")))
	if err != nil {
		t.Fatal(err)
	}
	if after.State.LastSeq != before.State.LastSeq || after.State.Msgs != before.State.Msgs || after.State.Subjects[sp.Step(enrich.Upload, "r-x")] != 0 {
		t.Errorf("%s after geo's publish: last seq %d, %d messages (%d of r-x's upload); before: %d, %d",
			sp.Stream(assets.StreamSteps), after.State.LastSeq, after.State.Msgs, after.State.Subjects[sp.Step(enrich.Upload, "r-x")], before.State.LastSeq, before.State.Msgs)
	}
	// (b) The keys bucket: it may read its registered key, not replace it.
	adminKeys, err := admin.KeyValue(ctx, sp.Bucket(assets.BucketKeys))
	if err != nil {
		t.Fatal(err)
	}
	keysBefore, err := adminKeys.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	geoKeys, err := geo.KeyValue(ctx, sp.Bucket(assets.BucketKeys))
	if err != nil {
		t.Fatal(err)
	}
	registered, err := identity.Registered(ctx, geoKeys, enrich.Geo)
	if err != nil || registered == "" {
		t.Fatalf("geo's user reading its registered key: %q, %v", registered, err)
	}
	short, cancelShort = context.WithTimeout(ctx, 2*time.Second)
	_, err = geoKeys.Put(short, "service."+enrich.Geo, []byte("UFORGED"))
	cancelShort()
	if err == nil {
		t.Error("geo's user wrote the keys bucket")
	}
	refused("$KV." + sp.Bucket(assets.BucketKeys) + ".service." + enrich.Geo)
	keysAfter, err := adminKeys.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pub, err := identity.Registered(ctx, adminKeys, enrich.Geo); err != nil || pub != registered || keysAfter.Values() != keysBefore.Values() {
		t.Errorf("geo's registered key after its user's write: %q, %v (%d values, %d before); want %q", pub, err, keysAfter.Values(), keysBefore.Values(), registered)
	}
	for _, v := range srv.violations() {
		if v.client != "probe-geo" {
			t.Errorf("the server refused another connection than the probe: %+v", v)
		}
	}
}

// serviceUsers is a nats-server with JetStream and users: admin, which may do everything,
// and one user per service holding its assets.Permissions (password: its name). As the
// server's logger it takes note of each permissions violation the server reports.
type serviceUsers struct {
	t   *testing.T
	srv *server.Server

	mu      sync.Mutex
	refused []violation
}

// violation is a publish or subscription the server refused: the connection's user and
// name (nats.Name), and the subject.
type violation struct{ user, client, subject string }

func startServiceUsers(t *testing.T, perms map[string]assets.Permissions) *serviceUsers {
	t.Helper()
	users := []*server.User{{Username: "admin", Password: "admin"}}
	for name, perm := range perms {
		users = append(users, &server.User{Username: name, Password: name, Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: perm.Publish, Deny: perm.PublishDeny},
			Subscribe: &server.SubjectPermission{Allow: perm.Subscribe},
			Response:  &server.ResponsePermission{MaxMsgs: 1, Expires: time.Minute},
		}})
	}
	srv, err := server.NewServer(&server.Options{ServerName: "enrich-users", Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: filepath.Join(t.TempDir(), "nats"), NoSigs: true, Users: users})
	if err != nil {
		t.Fatal(err)
	}
	u := &serviceUsers{t: t, srv: srv}
	srv.SetLogger(u, false, false)
	go srv.Start()
	if !srv.ReadyForConnections(15 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(srv.Shutdown)
	return u
}

// url is the server's URL with user's name and password.
func (u *serviceUsers) url(user string) string {
	return (&url.URL{Scheme: "nats", User: url.UserPassword(user, user), Host: strings.TrimPrefix(u.srv.ClientURL(), "nats://")}).String()
}

// connect connects as user, naming the connection name, its replies under inbox ("": the
// client's default).
func (u *serviceUsers) connect(user, name, inbox string) jetstream.JetStream {
	u.t.Helper()
	// A refusal is the server's to report (Errorf): the client's copy is not printed.
	opts := []nats.Option{nats.UserInfo(user, user), nats.Name(name), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})}
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

// violations are the permissions violations the server has reported.
func (u *serviceUsers) violations() []violation {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.refused)
}

// Errorf takes note of a permissions violation. The server reports one as an error of the
// connection: the format is its label, `<addr> - cid:<n> - "<version:lang:name>" - "<account>/user:<user>"`,
// then "Publish Violation - Subject %q" (or Reply, or "Subscription Violation - Subject %q, ..."),
// the subject the first argument. nats-server keeps no count of them (neither Varz nor
// Connz nor Accountz has one), so this is the one place the server says it.
func (u *serviceUsers) Errorf(format string, v ...any) {
	label, _, ok := strings.Cut(format, " - Publish Violation")
	if !ok {
		label, _, ok = strings.Cut(format, " - Subscription Violation")
	}
	if !ok {
		return
	}
	r := violation{client: "?", user: "?"}
	if len(v) > 0 {
		r.subject = fmt.Sprintf("%s", v[0]) // a []byte
	}
	// The label's last two fields, quoted: the client's version and name, its account and user.
	parts := strings.Split(label, " - ")
	if n := len(parts); n >= 2 {
		_, user, _ := strings.Cut(strings.Trim(parts[n-1], `"`), "/")
		r.user = strings.TrimPrefix(user, "user:")
		version := strings.Trim(parts[n-2], `"`)
		r.client = version[strings.LastIndex(version, ":")+1:]
	}
	u.mu.Lock()
	u.refused = append(u.refused, r)
	u.mu.Unlock()
}

func (*serviceUsers) Noticef(string, ...any) {}
func (*serviceUsers) Warnf(string, ...any)   {}
func (*serviceUsers) Fatalf(string, ...any)  {}
func (*serviceUsers) Debugf(string, ...any)  {}
func (*serviceUsers) Tracef(string, ...any)  {}

// differ is what want has and got lacks, and what got has beyond want.
func differ(got, want []string) (missing, extra []string) {
	for _, w := range want {
		if !slices.Contains(got, w) {
			missing = append(missing, w)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			extra = append(extra, g)
		}
	}
	return missing, extra
}
