package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/eventually"
	"github.com/cairnhq/cairn/pkg/ratelimit"
)

const bucket = "limits"

// testServer is an embedded nats-server the test can stop and start again on the same
// port and storage.
type testServer struct {
	t     testing.TB
	store string
	port  int
	srv   *server.Server
}

func startServer(t testing.TB) *testServer {
	t.Helper()
	ts := &testServer{t: t, store: t.TempDir(), port: -1}
	ts.start()
	t.Cleanup(ts.stop)
	return ts
}

func (ts *testServer) start() {
	ts.t.Helper()
	s, err := server.NewServer(&server.Options{ServerName: "limits", Host: "127.0.0.1", Port: ts.port,
		JetStream: true, StoreDir: ts.store, NoLog: true, NoSigs: true})
	if err != nil {
		ts.t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		ts.t.Fatal("nats-server not ready")
	}
	ts.srv, ts.port = s, s.Addr().(*net.TCPAddr).Port
}

func (ts *testServer) stop() {
	if ts.srv != nil {
		ts.srv.Shutdown()
		ts.srv.WaitForShutdown()
		ts.srv = nil
	}
}

// client is another connection to the server, as another instance would have.
func (ts *testServer) client() jetstream.JetStream {
	ts.t.Helper()
	nc, err := nats.Connect(ts.srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		ts.t.Fatal(err)
	}
	ts.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		ts.t.Fatal(err)
	}
	return js
}

// setup starts a server with the limits bucket and returns it.
func setup(t testing.TB) *testServer {
	t.Helper()
	ts := startServer(t)
	if _, err := ts.client().CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: bucket, History: 1}); err != nil {
		t.Fatal(err)
	}
	return ts
}

func limiter(t testing.TB, js jetstream.JetStream, l ratelimit.Limit, c ratelimit.Config) *ratelimit.Limiter {
	t.Helper()
	c.JS, c.Limit = js, l
	lim, err := ratelimit.New(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// mostIn is the most of the sorted times within any closed window of length d.
func mostIn(times []time.Time, d time.Duration) int {
	best, first := 0, 0
	for i, t := range times {
		for t.Sub(times[first]) > d {
			first++
		}
		best = max(best, i-first+1)
	}
	return best
}

// Four instances (each its own connection and limiter), three goroutines each, share one
// limit: the slots, by the server's clock, are one interval apart or more, so no window
// of a second holds more than the limit allows; every booking is its own revision; and the
// last call returned no earlier than the limit allows after the first Wait began.
func TestSharedAcrossInstances(t *testing.T) {
	ts := setup(t)
	l := ratelimit.Limit{Bucket: bucket, Key: "model", PerSecond: 40, Burst: 1}
	const instances, workers, each = 4, 3, 5
	var (
		mu     sync.Mutex
		grants []ratelimit.Grant
		wg     sync.WaitGroup
		lims   []*ratelimit.Limiter
	)
	for range instances {
		lims = append(lims, limiter(t, ts.client(), l, ratelimit.Config{}))
	}
	began := time.Now()
	var last time.Time
	for _, lim := range lims {
		for range workers {
			wg.Go(func() {
				for range each {
					g, err := lim.Wait(context.Background())
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					grants = append(grants, g)
					if now := time.Now(); now.After(last) {
						last = now
					}
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	n := instances * workers * each
	if len(grants) != n {
		t.Fatalf("%d grants, want %d", len(grants), n)
	}
	slices.SortFunc(grants, func(a, b ratelimit.Grant) int { return a.At.Compare(b.At) })
	var at []time.Time
	revs := map[uint64]bool{}
	for i, g := range grants {
		at = append(at, g.At)
		revs[g.Revision] = true
		if i > 0 && g.At.Sub(grants[i-1].At) < l.Interval() {
			t.Errorf("slots %d and %d are %s apart, under the interval %s", i-1, i, g.At.Sub(grants[i-1].At), l.Interval())
		}
	}
	if got, most := mostIn(at, time.Second), l.MostIn(time.Second); got > most {
		t.Errorf("%d slots within one second, the limit allows %d", got, most)
	}
	if len(revs) != n {
		t.Errorf("%d distinct booking revisions for %d grants", len(revs), n)
	}
	if min := time.Duration(n-1) * l.Interval(); last.Sub(began) < min {
		t.Errorf("%d calls returned within %s, the limit needs %s", n, last.Sub(began), min)
	}
	var conflicts uint64
	for i, lim := range lims {
		s := lim.Stats()
		if s.Grants != workers*each {
			t.Errorf("instance %d: %d grants, want %d", i, s.Grants, workers*each)
		}
		conflicts += s.Conflicts
	}
	t.Logf("%d grants in %s, %d bookings lost to another's and tried again", n, last.Sub(began), conflicts)
}

// A burst: after a quiet spell, Burst calls go at once; the next ones wait their intervals.
func TestBurst(t *testing.T) {
	ts := setup(t)
	l := ratelimit.Limit{Bucket: bucket, Key: "burst", PerSecond: 2, Burst: 3}
	lim := limiter(t, ts.client(), l, ratelimit.Config{})
	var at []time.Time
	for range 5 {
		g, err := lim.Wait(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		at = append(at, g.At)
	}
	if got := mostIn(at, l.Interval()-time.Millisecond); got != 3 {
		t.Errorf("%d slots within one interval, want the burst, 3: %v", got, at)
	}
	// The queue began at the first slot: the fourth call is one interval after it, the
	// fifth one after the fourth.
	if d := at[3].Sub(at[0]); d < l.Interval() {
		t.Errorf("the fourth slot follows the first by %s, under the interval %s", d, l.Interval())
	}
	if d := at[4].Sub(at[3]); d < l.Interval() {
		t.Errorf("the fifth slot follows the fourth by %s, under the interval %s", d, l.Interval())
	}
	if got, most := mostIn(at, time.Second), l.MostIn(time.Second); got > most {
		t.Errorf("%d slots within one second, the limit allows %d", got, most)
	}
}

// A context that ends before the slot returns its error, and the slot it booked stays
// unused: the next call comes one interval after it, not in its place.
func TestContextEndsTheWait(t *testing.T) {
	ts := setup(t)
	l := ratelimit.Limit{Bucket: bucket, Key: "model", PerSecond: 1}
	lim := limiter(t, ts.client(), l, ratelimit.Config{})
	first, err := lim.Wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := lim.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait under a 100ms context: %v, want its deadline", err)
	}
	third, err := lim.Wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if d := third.At.Sub(first.At); d < 2*l.Interval() {
		t.Errorf("the call after the abandoned slot is %s after the first, want two intervals or more", d)
	}
	if s := lim.Stats(); s.Grants != 2 {
		t.Errorf("%d grants, want 2", s.Grants)
	}
}

// The bucket out of reach: Wait grants nothing and gives up with ErrUnavailable after
// Config.Unavailable; a Wait in progress when the server comes back is granted.
func TestUnavailable(t *testing.T) {
	ts := setup(t)
	l := ratelimit.Limit{Bucket: bucket, Key: "model", PerSecond: 100}
	js := ts.client()
	short := limiter(t, js, l, ratelimit.Config{Unavailable: 300 * time.Millisecond, Timeout: 100 * time.Millisecond})
	long := limiter(t, js, l, ratelimit.Config{Unavailable: time.Minute, Timeout: 100 * time.Millisecond})
	if _, err := short.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	ts.stop()
	if _, err := short.Wait(context.Background()); !errors.Is(err, ratelimit.ErrUnavailable) {
		t.Fatalf("Wait with the server down: %v, want ErrUnavailable", err)
	}
	if s := short.Stats(); s.Grants != 1 || s.Unreachable == 0 {
		t.Errorf("stats %+v, want 1 grant and failed reads", s)
	}
	done := make(chan error, 1)
	go func() {
		_, err := long.Wait(context.Background())
		done <- err
	}()
	eventually.That(t, 30*time.Second, "the waiting limiter tried the bucket twice", func() error {
		if n := long.Stats().Unreachable; n < 2 {
			select {
			case err := <-done:
				t.Fatalf("Wait returned with the server down: %v", err)
			default:
			}
			return fmt.Errorf("%d failed reads", n)
		}
		return nil
	})
	ts.start()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Wait after the server came back: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Wait did not return within a minute of the server's return")
	}
	if s := long.Stats(); s.Grants != 1 {
		t.Errorf("stats %+v, want 1 grant", s)
	}
}

// Configuration errors are ErrConfig; a key holding something else is ErrState.
func TestErrors(t *testing.T) {
	ts := setup(t)
	js := ts.client()
	for _, l := range []ratelimit.Limit{
		{Bucket: bucket, Key: "model"},
		{Bucket: bucket, Key: "a.b", PerSecond: 1},
		{Key: "model", PerSecond: 1},
		{Bucket: bucket, Key: "model", PerSecond: 1, Burst: -1},
	} {
		if _, err := ratelimit.New(context.Background(), ratelimit.Config{JS: js, Limit: l}); !errors.Is(err, ratelimit.ErrConfig) {
			t.Errorf("New(%+v): %v, want ErrConfig", l, err)
		}
	}
	kv, err := js.KeyValue(context.Background(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), "junk", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	lim := limiter(t, js, ratelimit.Limit{Bucket: bucket, Key: "junk", PerSecond: 1}, ratelimit.Config{})
	if _, err := lim.Wait(context.Background()); !errors.Is(err, ratelimit.ErrState) {
		t.Errorf("Wait on a key holding junk: %v, want ErrState", err)
	}
}
