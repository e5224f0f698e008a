package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/devproc"
	job "github.com/cairnhq/cairn/internal/night"
	"github.com/cairnhq/cairn/internal/service"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/identity"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/ratelimit"
)

// deployDir is the repository's deploy/ folder (absolute: see TestMain).
var deployDir = absPath("..", "deploy")

// violations collects what a nats-server logs about refused publishes and subscriptions.
type violations struct {
	mu    sync.Mutex
	lines []string
}

func (v *violations) Errorf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	if strings.Contains(line, "Violation") {
		v.mu.Lock()
		v.lines = append(v.lines, line)
		v.mu.Unlock()
	}
}

func (v *violations) Noticef(string, ...any) {}
func (v *violations) Warnf(string, ...any)   {}
func (v *violations) Fatalf(string, ...any)  {}
func (v *violations) Debugf(string, ...any)  {}
func (v *violations) Tracef(string, ...any)  {}

func (v *violations) all() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.lines...)
}

// deployNight is a procs night whose nats-server runs deploy/nats/single.conf: its TLS, its
// account and its users with their permissions. Every service runs as its own user.
type deployNight struct {
	*procsNight
	passwords map[string]string // user -> password, from deploy/.env
	ca        string            // the CA the clients trust
	refused   *violations
}

// deployPasswords reads deploy/.env: NATS_PASSWORD_POST_LEDGER=x is user post-ledger's password x.
func deployPasswords(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(deployDir, ".env"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if user, found := strings.CutPrefix(k, "NATS_PASSWORD_"); ok && found {
			out[strings.ReplaceAll(strings.ToLower(user), "_", "-")] = v
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// newDeployNight starts the nats-server from the deploy configuration on the night's port,
// with storage of its own, and runs `cairn init` as admin. It starts no service.
func newDeployNight(t *testing.T) *deployNight {
	t.Helper()
	n := newNight(t, 0)
	u, err := url.Parse(n.url)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	ca, err := filepath.Abs(filepath.Join(deployDir, "nats", "tls", "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	d := &deployNight{passwords: deployPasswords(t), ca: ca, refused: &violations{}}
	h := &procsNight{night: n, port: port, store: t.TempDir(), metrics: map[*devproc.Proc]string{},
		count: map[string]int{}, ports: map[string]bool{u.Host: true}}
	d.procsNight = h
	h.srv = d.startServer(t)
	n.url = d.url("admin") // what h.env gives every process unless it is told otherwise
	t.Cleanup(h.cleanup)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := d.cli(ctx, "init"); err != nil {
		t.Fatalf("cairn init as admin: %v\n%s", err, out)
	}
	// A generous connect timeout: the server is race-built, in this process, and checks a
	// bcrypt password over TLS beside other tests' nights.
	h.nc, err = nats.Connect(n.url, nats.RootCAs(ca), nats.Timeout(30*time.Second), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if h.js, err = jetstream.New(h.nc); err != nil {
		t.Fatal(err)
	}
	return d
}

// startServer runs deploy/nats/single.conf as it is, but for the port, the storage, the
// monitoring port (off) and the logger, which collects the permission violations.
func (d *deployNight) startServer(t *testing.T) *server.Server {
	t.Helper()
	// The configuration's certificate paths are relative to the working directory, which
	// TestMain made one whose tls/ is deploy/nats/tls: so no test changes it (t.Chdir), and
	// any number of these servers start at once.
	opts, err := server.ProcessConfigFile(filepath.Join(deployDir, "nats", "single.conf"))
	if err != nil {
		t.Fatalf("deploy/nats/single.conf: %v", err)
	}
	opts.Host, opts.Port, opts.StoreDir = "127.0.0.1", d.port, d.store
	opts.HTTPHost, opts.HTTPPort = "", 0
	opts.NoSigs = true
	// The server's first PING to a client goes out 2 s after it connected unless this is
	// set; a client still waiting for the PONG to its CONNECT then fails ("expected 'PONG',
	// got 'PING'"). Here the server is race-built, in the test process, and checks bcrypt
	// passwords for every service starting at once beside other tests' nights: on a busy
	// 2-core machine that CONNECT can take longer. The first PING then goes at the ping
	// interval, as every later one does.
	opts.DisableShortFirstPing = true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("nats-server from deploy/nats/single.conf: %v", err)
	}
	s.SetLoggerV2(d.refused, false, false, false)
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		t.Fatalf("nats-server on port %d not ready within 30s", d.port)
	}
	return s
}

// url is the server's URL with user's credentials.
func (d *deployNight) url(user string) string {
	pw, ok := d.passwords[user]
	if !ok {
		d.t.Fatalf("deploy/.env has no password for user %s", user)
	}
	return (&url.URL{Scheme: "tls", User: url.UserPassword(user, pw), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(d.port))}).String()
}

// userEnv is what a process run as user needs besides the common environment.
func (d *deployNight) userEnv(user string) []string {
	return []string{"CAIRN_NATS_URL=" + d.url(user), "SSL_CERT_FILE=" + d.ca}
}

// cli runs the cairn command as admin.
func (d *deployNight) cli(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, cairnBin, args...)
	cmd.Env = d.env(d.userEnv("admin")...)
	return cmd.CombinedOutput()
}

// services starts one process of each named service, each connected as its own user.
func (d *deployNight) services(names ...string) {
	d.t.Helper()
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() { _, errs[i] = d.start(name, d.userEnv(name)) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		d.t.Fatal(err)
	}
}

// svcAs starts one process of the named service as its own user, with extra environment.
func (d *deployNight) svcAs(name string, extra ...string) *devproc.Proc {
	d.t.Helper()
	p, err := d.start(name, append(d.userEnv(name), extra...))
	if err != nil {
		d.t.Fatal(err)
	}
	return p
}

// connect connects as user (or without credentials for user "") and returns the errors
// the server sends the connection asynchronously: refused publishes among them.
func (d *deployNight) connect(user string) (*nats.Conn, <-chan error, error) {
	errs := make(chan error, 64)
	u := "tls://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(d.port))
	if user != "" {
		u = d.url(user)
	}
	opts := []nats.Option{nats.RootCAs(d.ca), nats.NoReconnect(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		})}
	if user != "" {
		// Replies come under the user's own prefix, as service.Connect's do.
		opts = append(opts, nats.CustomInboxPrefix(service.Config{InboxPrefix: "_INBOX.cairn"}.Inbox(user)))
	}
	nc, err := nats.Connect(u, opts...)
	return nc, errs, err
}

// errPermRefused: the server refused a publish for want of permission.
var errPermRefused = errors.New("refused by the server's permissions")

// permRequest sends a request on subject, as the JetStream API and a JetStream publish do, and
// returns nil when the server answered and errPermRefused when it refused the publish.
func permRequest(nc *nats.Conn, errs <-chan error, subject string, data []byte) error {
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(subject, inbox, data); err != nil {
		return err
	}
	if err := nc.Flush(); err != nil {
		return err
	}
	replies := make(chan error, 1)
	go func() {
		_, err := sub.NextMsg(10 * time.Second)
		replies <- err
	}()
	select {
	case err := <-replies:
		if err != nil {
			return fmt.Errorf("no answer and no refusal for %s: %w", subject, err)
		}
		return nil
	case err := <-errs:
		if errors.Is(err, nats.ErrPermissionViolation) {
			return errPermRefused
		}
		return fmt.Errorf("%s: %w", subject, err)
	}
}

// assertNoneRefused fails the test if the server refused any service anything.
func (d *deployNight) assertNoneRefused() {
	d.t.Helper()
	if v := d.refused.all(); len(v) > 0 {
		d.t.Fatalf("the server refused %d operations of the services; their permissions miss:\n%s", len(v), strings.Join(v, "\n"))
	}
}

// waitRun polls the run's record until ok holds for it, and stops at the first refusal: a
// service refused a permission may wait forever.
func (d *deployNight) waitRun(what string, ok func(*kc.Record) bool) {
	d.t.Helper()
	var last *kc.Record
	done := poll(runLimit, func() bool {
		d.assertNoneRefused()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		kv, err := d.js.KeyValue(ctx, assets.BucketRuns)
		if err != nil {
			return false
		}
		e, err := kv.Get(ctx, runID)
		if err != nil {
			return false
		}
		if last, err = kc.Decode(e.Value()); err != nil {
			d.t.Fatal(err)
		}
		return ok(last)
	})
	d.assertNoneRefused()
	if !done {
		d.t.Fatalf("the run's record did not show %s within %s; last record: %+v", what, runLimit, last)
	}
}

// The reference night on the deploy configuration, every service with its own user and
// nothing more than its permissions, post-ledger killed in the middle of its step and taken
// over by another instance, then an undo of one supplier (the compensator and the outbox
// sender's withdrawals): the night equals the truth and the server refused nothing.
// Then the refusals: extract cannot schedule post-ledger, no service can delete or purge a
// stream, a bucket or a durable consumer, and a client without a user is refused.
func TestPrivilege(t *testing.T) {
	t.Parallel()
	takeDeployNightSlot(t)
	d := newDeployNight(t)
	d.services(allBut("post-ledger")...)
	a := d.svcAs("post-ledger", "CAIRN_FAULTS="+stallAt24)
	d.startRun()
	d.waitFired(stallAt24, runLimit)
	a.Kill()
	d.svcAs("post-ledger")
	d.waitRun("done", func(r *kc.Record) bool { return r.Status == kc.Done })
	d.assertTruth()
	if c := d.audit(); c["reassigned"] < 1 {
		t.Errorf("audit %v: no reassigned event: the killed post-ledger's lease was never taken over", c)
	}
	sup, adjs := d.supplierWithMost()
	d.publish(events.RunSubject(runID, events.VerbUndo), fmt.Sprintf(`{"scope":{"supplier":%q}}`, sup))
	d.waitRun("the undo finished", func(r *kc.Record) bool {
		return r.Undo != nil && r.Undo.Cursor == r.Undo.Total && r.Status == kc.Done
	})
	d.assertSupplierUndone(sup, adjs)
	d.assertNoneRefused()

	t.Run("extract cannot schedule post-ledger", func(t *testing.T) {
		nc, errs, err := d.connect("extract")
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		if err := permRequest(nc, errs, "$JS.API.STREAM.INFO."+assets.StreamSteps, nil); err != nil {
			t.Fatalf("extract reading CAIRN_STEPS' info: %v, want an answer", err)
		}
		subject := events.StepSubject("post-ledger", "probe")
		if err := permRequest(nc, errs, subject, []byte(`{}`)); !errors.Is(err, errPermRefused) {
			t.Fatalf("extract publishing %s: %v, want %v", subject, err, errPermRefused)
		}
		s, err := d.js.Stream(t.Context(), assets.StreamSteps)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetLastMsgForSubject(t.Context(), subject); !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Fatalf("CAIRN_STEPS on %s: %v, want no message", subject, err)
		}
	})

	t.Run("extract books the model's limit, and nothing else in cairn-limits", func(t *testing.T) {
		nc, errs, err := d.connect("extract")
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		lim, err := ratelimit.New(t.Context(), ratelimit.Config{JS: js, Limit: service.Config{ModelRPS: 1000}.ModelLimit(), Unavailable: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			if _, err := lim.Wait(t.Context()); err != nil {
				t.Fatalf("extract booking the model's limit (%d): %v", i+1, err)
			}
		}
		if err := permRequest(nc, errs, "$KV."+assets.BucketLimits+".other", []byte(`{}`)); !errors.Is(err, errPermRefused) {
			t.Errorf("extract writing another limit: %v, want %v", err, errPermRefused)
		}
		fetch, ferrs, err := d.connect("fetch")
		if err != nil {
			t.Fatal(err)
		}
		defer fetch.Close()
		if err := permRequest(fetch, ferrs, "$KV."+assets.BucketLimits+"."+service.ModelLimitKey, []byte(`{}`)); !errors.Is(err, errPermRefused) {
			t.Errorf("fetch booking the model's limit: %v, want %v", err, errPermRefused)
		}
	})

	t.Run("a service answers only under its own owner inbox", func(t *testing.T) {
		extract, errs, err := d.connect("extract")
		if err != nil {
			t.Fatal(err)
		}
		defer extract.Close()
		asker, _, err := d.connect("post-ledger")
		if err != nil {
			t.Fatal(err)
		}
		defer asker.Close()
		if _, err := extract.Subscribe("cairn.owner.post-ledger.probe", func(m *nats.Msg) { _ = m.Respond([]byte("alive")) }); err != nil {
			t.Fatal(err)
		}
		if err := extract.Flush(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-errs:
			if !errors.Is(err, nats.ErrPermissionViolation) {
				t.Fatalf("extract subscribing under post-ledger's owner inboxes: %v, want %v", err, nats.ErrPermissionViolation)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("extract subscribed under post-ledger's owner inboxes and the server said nothing")
		}
		if _, err := asker.Request("cairn.owner.post-ledger.probe", nil, 5*time.Second); !errors.Is(err, nats.ErrNoResponders) {
			t.Fatalf("asking the inbox extract may not answer: %v, want %v", err, nats.ErrNoResponders)
		}
		// Under its own prefix it answers, and the answer (a response) gets through.
		if _, err := extract.Subscribe("cairn.owner.extract.probe", func(m *nats.Msg) { _ = m.Respond([]byte("alive")) }); err != nil {
			t.Fatal(err)
		}
		if err := extract.Flush(); err != nil {
			t.Fatal(err)
		}
		if m, err := asker.Request("cairn.owner.extract.probe", nil, 5*time.Second); err != nil || string(m.Data) != "alive" {
			t.Fatalf("asking extract's own owner inbox: %v, want the answer alive", err)
		}
	})

	t.Run("a service reads only its own replies", func(t *testing.T) {
		for _, subject := range []string{"_INBOX.>", "_INBOX.cairn.post-ledger.>", "_INBOX.cairn.>"} {
			nc, errs, err := d.connect("extract")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := nc.SubscribeSync(subject); err != nil {
				t.Fatal(err)
			}
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-errs:
				if !errors.Is(err, nats.ErrPermissionViolation) {
					t.Errorf("extract subscribing to %s: %v, want %v", subject, err, nats.ErrPermissionViolation)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("extract subscribed to %s, others' replies, and the server said nothing", subject)
			}
			nc.Close()
		}
	})

	t.Run("no service deletes a stream, a bucket or a durable", func(t *testing.T) {
		streams := []string{assets.StreamRuns, assets.StreamSteps, assets.StreamSaga, assets.StreamOutbox,
			assets.StreamAudit, assets.StreamRejected, "OBJ_" + assets.ObjectArtifacts}
		for _, b := range []string{assets.BucketRuns, assets.BucketMemo, assets.BucketHandovers, assets.BucketOutbox, assets.BucketNaturalKeys, assets.BucketLimits} {
			streams = append(streams, "KV_"+b)
		}
		var subjects []string
		for _, s := range streams {
			subjects = append(subjects, "$JS.API.STREAM.DELETE."+s, "$JS.API.STREAM.PURGE."+s)
		}
		subjects = append(subjects, "$JS.API.CONSUMER.DELETE."+assets.StreamRuns+"."+assets.ConsumerControl,
			"$JS.API.CONSUMER.DELETE."+assets.StreamRuns+"."+assets.ConsumerCompensator,
			"$JS.API.CONSUMER.DELETE."+assets.StreamOutbox+"."+assets.ConsumerOutbox)
		for _, step := range job.Pipeline.Names() {
			subjects = append(subjects, "$JS.API.CONSUMER.DELETE."+assets.StreamSteps+"."+step)
		}
		for _, user := range service.Services() {
			nc, errs, err := d.connect(user)
			if err != nil {
				t.Fatalf("connecting as %s: %v", user, err)
			}
			for _, subject := range subjects {
				if err := permRequest(nc, errs, subject, nil); !errors.Is(err, errPermRefused) {
					t.Errorf("%s: request on %s: %v, want %v", user, subject, err, errPermRefused)
				}
			}
			nc.Close()
		}
		// Everything is still there.
		for _, s := range streams {
			if _, err := d.js.Stream(t.Context(), s); err != nil {
				t.Errorf("stream %s after the attempts: %v", s, err)
			}
		}
		for _, c := range (assets.Config{Steps: job.Pipeline.Names()}).Consumers() {
			if _, err := d.js.Consumer(t.Context(), c.Stream, c.Config.Durable); err != nil {
				t.Errorf("consumer %s on %s after the attempts: %v", c.Config.Durable, c.Stream, err)
			}
		}
	})

	t.Run("ledger-api reads the callers' keys, and nothing else", func(t *testing.T) {
		nc, errs, err := d.connect("ledger-api")
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		keys := "$JS.API.DIRECT.GET.KV_" + identity.Bucket + ".$KV." + identity.Bucket + "."
		for _, subject := range []string{"$JS.API.STREAM.INFO.KV_" + identity.Bucket, keys + identity.SealKey, keys + "service.post-ledger"} {
			if err := permRequest(nc, errs, subject, nil); err != nil {
				t.Fatalf("ledger-api reading %s: %v, want an answer", subject, err)
			}
		}
		for _, subject := range []string{
			"$KV." + identity.Bucket + ".service.post-ledger", // replace a caller's key
			"$KV." + identity.Bucket + ".approver.mallory",    // add an approver
			"$JS.API.DIRECT.GET.KV_" + assets.BucketRuns + ".$KV." + assets.BucketRuns + "." + runID,
			"$KV." + assets.BucketRuns + "." + runID,
			events.RunStartSubject,
			events.StepSubject("post-ledger", "probe"),
		} {
			if err := permRequest(nc, errs, subject, []byte(`{}`)); !errors.Is(err, errPermRefused) {
				t.Fatalf("ledger-api publishing %s: %v, want %v", subject, err, errPermRefused)
			}
		}
	})

	t.Run("a client without a user is refused", func(t *testing.T) {
		if nc, _, err := d.connect(""); !errors.Is(err, nats.ErrAuthorization) {
			if nc != nil {
				nc.Close()
			}
			t.Fatalf("connecting without a user: %v, want %v", err, nats.ErrAuthorization)
		}
		d.passwords["intruder"] = "guess"
		if nc, _, err := d.connect("intruder"); !errors.Is(err, nats.ErrAuthorization) {
			if nc != nil {
				nc.Close()
			}
			t.Fatalf("connecting as an unknown user: %v, want %v", err, nats.ErrAuthorization)
		}
	})
}
