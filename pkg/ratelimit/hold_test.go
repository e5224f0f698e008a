package ratelimit_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/ratelimit"
)

// written is the server's timestamp of the latest entry of key: right after a Hold, the
// hold's own, from which its end follows.
func written(t *testing.T, js jetstream.JetStream, key string) time.Time {
	t.Helper()
	kv, err := js.KeyValue(t.Context(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	return e.Created()
}

// One instance holds the limit; another's next slot, and the holder's own, are not
// before the hold's end (the hold's timestamp plus its duration, by the server's clock),
// though the limit alone would have granted them at once.
func TestHoldIsShared(t *testing.T) {
	ts := setup(t)
	l := ratelimit.Limit{Bucket: bucket, Key: "api", PerSecond: 50}
	jsA, jsB := ts.client(), ts.client()
	a, b := limiter(t, jsA, l, ratelimit.Config{}), limiter(t, jsB, l, ratelimit.Config{})
	if _, err := a.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	const d = 400 * time.Millisecond
	if err := a.Hold(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	end := written(t, jsA, l.Key).Add(d)
	gb, err := b.Wait(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if gb.At.Before(end) {
		t.Errorf("the other instance's slot %s is %s before the hold's end", gb.At, end.Sub(gb.At))
	}
	ga, err := a.Wait(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if ga.At.Before(end) {
		t.Errorf("the holder's own slot %s is %s before the hold's end", ga.At, end.Sub(ga.At))
	}
	if s := a.Stats(); s.Holds != 1 || s.Grants != 2 {
		t.Errorf("the holder's stats %+v, want 1 hold and 2 grants", s)
	}
	if s := b.Stats(); s.Holds != 0 || s.Grants != 1 {
		t.Errorf("the other's stats %+v, want no hold and 1 grant", s)
	}
}

// A hold never shortens what is there: a booking that keeps the limit busy past the
// hold's end, or a longer hold written earlier by another instance.
func TestHoldNeverShortens(t *testing.T) {
	t.Run("a booking", func(t *testing.T) {
		ts := setup(t)
		l := ratelimit.Limit{Bucket: bucket, Key: "api", PerSecond: 2}
		lim := limiter(t, ts.client(), l, ratelimit.Config{})
		first, err := lim.Wait(t.Context()) // books the limit for the next 500ms
		if err != nil {
			t.Fatal(err)
		}
		if err := lim.Hold(t.Context(), 100*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		next, err := lim.Wait(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if d := next.At.Sub(first.At); d < l.Interval() {
			t.Errorf("the slot after a short hold follows the first by %s, under the interval %s", d, l.Interval())
		}
	})
	t.Run("a longer hold", func(t *testing.T) {
		ts := setup(t)
		l := ratelimit.Limit{Bucket: bucket, Key: "api", PerSecond: 50}
		js := ts.client()
		a, b := limiter(t, js, l, ratelimit.Config{}), limiter(t, ts.client(), l, ratelimit.Config{})
		const long = 600 * time.Millisecond
		if err := a.Hold(t.Context(), long); err != nil {
			t.Fatal(err)
		}
		end := written(t, js, l.Key).Add(long)
		if err := b.Hold(t.Context(), 10*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		g, err := b.Wait(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if g.At.Before(end) {
			t.Errorf("the slot after a short hold is %s before the longer hold's end", end.Sub(g.At))
		}
	})
}

// A hold of no time, less, or more than MaxHold is ErrHold naming the value, and writes
// nothing; MaxHold itself is held.
func TestHoldValues(t *testing.T) {
	ts := setup(t)
	js := ts.client()
	l := ratelimit.Limit{Bucket: bucket, Key: "api", PerSecond: 1}
	lim := limiter(t, js, l, ratelimit.Config{})
	for _, d := range []time.Duration{0, -time.Second, ratelimit.MaxHold + time.Nanosecond, 2 * time.Hour} {
		err := lim.Hold(t.Context(), d)
		if !errors.Is(err, ratelimit.ErrHold) {
			t.Errorf("Hold(%s): %v, want ErrHold", d, err)
			continue
		}
		if !strings.Contains(err.Error(), d.String()) {
			t.Errorf("Hold(%s): %q does not name the value", d, err)
		}
	}
	kv, err := js.KeyValue(t.Context(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(t.Context(), l.Key); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("after refused holds the key is %v, want not found", err)
	}
	if s := lim.Stats(); s.Holds != 0 {
		t.Errorf("%d holds counted, want 0", s.Holds)
	}
	if err := lim.Hold(t.Context(), ratelimit.MaxHold); err != nil {
		t.Errorf("Hold(MaxHold): %v", err)
	}
	if s := lim.Stats(); s.Holds != 1 {
		t.Errorf("%d holds counted, want 1", s.Holds)
	}
}

// After a hold the limit's rate is kept: every slot is at the hold's end or later, at most
// the burst go at once, and the next ones an interval apart, over two instances.
func TestHoldThenTheRate(t *testing.T) {
	ts := setup(t)
	l := ratelimit.Limit{Bucket: bucket, Key: "api", PerSecond: 20, Burst: 2}
	js := ts.client()
	lims := []*ratelimit.Limiter{limiter(t, js, l, ratelimit.Config{}), limiter(t, ts.client(), l, ratelimit.Config{})}
	const d = 300 * time.Millisecond
	if err := lims[0].Hold(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	end := written(t, js, l.Key).Add(d)
	got := make(chan ratelimit.Grant, 8)
	errs := make(chan error, 2)
	for _, lim := range lims {
		go func() {
			for range 4 {
				g, err := lim.Wait(context.Background())
				if err != nil {
					errs <- err
					return
				}
				got <- g
			}
			errs <- nil
		}()
	}
	for range lims {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	close(got)
	var at []time.Time
	for g := range got {
		if g.At.Before(end) {
			t.Errorf("slot %s is %s before the hold's end", g.At, end.Sub(g.At))
		}
		at = append(at, g.At)
	}
	slices.SortFunc(at, time.Time.Compare)
	if n := mostIn(at, l.Interval()-time.Millisecond); n > l.Burst {
		t.Errorf("%d slots within one interval, the burst is %d: %v", n, l.Burst, at)
	}
	for i := l.Burst; i < len(at); i++ { // a burst's worth of slots later is an interval later
		if gap := at[i].Sub(at[i-l.Burst]); gap < l.Interval() {
			t.Errorf("slots %d and %d are %s apart, under the interval %s", i-l.Burst, i, gap, l.Interval())
		}
	}
	if n, most := mostIn(at, time.Second), l.MostIn(time.Second); n > most {
		t.Errorf("%d slots within one second, the limit allows %d", n, most)
	}
}

// A hold with the bucket out of reach is ErrUnavailable after Config.Unavailable, and on
// a key that holds something else ErrState, as Wait is: nothing is counted held.
func TestHoldFails(t *testing.T) {
	ts := setup(t)
	js := ts.client()
	kv, err := js.KeyValue(t.Context(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), "junk", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	junk := limiter(t, js, ratelimit.Limit{Bucket: bucket, Key: "junk", PerSecond: 1}, ratelimit.Config{})
	if err := junk.Hold(t.Context(), time.Second); !errors.Is(err, ratelimit.ErrState) {
		t.Errorf("Hold on a key holding junk: %v, want ErrState", err)
	}
	lim := limiter(t, js, ratelimit.Limit{Bucket: bucket, Key: "api", PerSecond: 1},
		ratelimit.Config{Unavailable: 300 * time.Millisecond, Timeout: 100 * time.Millisecond})
	ts.stop()
	if err := lim.Hold(t.Context(), time.Second); !errors.Is(err, ratelimit.ErrUnavailable) {
		t.Errorf("Hold with the server down: %v, want ErrUnavailable", err)
	}
	if s := lim.Stats(); s.Holds != 0 || s.Unreachable == 0 {
		t.Errorf("stats %+v, want no hold and failed writes", s)
	}
}
