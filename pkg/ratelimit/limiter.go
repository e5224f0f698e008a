package ratelimit

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Config is a limiter's configuration.
type Config struct {
	JS    jetstream.JetStream
	Limit Limit
	// Unavailable is how long Wait keeps trying a bucket it cannot read or write before it
	// gives up with ErrUnavailable; default 30s. Wait never grants a call without the bucket.
	Unavailable time.Duration
	// Timeout bounds each read or write of the bucket; default 2s.
	Timeout time.Duration
	// Backoff is the first pause after a failed read or write of the bucket, doubled after
	// each next one up to 2s; default 50ms.
	Backoff time.Duration
}

// MaxHold is the longest hold [Limiter.Hold] writes; a longer wait is the caller's to
// schedule, so that no mistaken value stops every instance for longer.
const MaxHold = time.Hour

// Limiter grants calls under a Limit shared by every instance (see the package
// documentation). It is safe for concurrent use.
type Limiter struct {
	kv          jetstream.KeyValue
	limit       Limit
	unavailable time.Duration
	timeout     time.Duration
	backoff     time.Duration

	grants      atomic.Uint64
	waitedNS    atomic.Int64
	conflicts   atomic.Uint64
	unreachable atomic.Uint64
	holds       atomic.Uint64
}

// Grant is one call granted.
type Grant struct {
	// At is the call's slot by the NATS server's clock; Waited is how long Wait took, from
	// its call to its return (the booking and the wait for the slot).
	At     time.Time
	Waited time.Duration
	// Revision is the bucket revision that booked it.
	Revision uint64
}

// Stats are a limiter's counts since New.
type Stats struct {
	Grants      uint64        // calls granted
	Waited      time.Duration // the time Wait took, over every grant
	Conflicts   uint64        // bookings and holds lost to another instance's (and tried again)
	Unreachable uint64        // reads or writes of the bucket that failed
	Holds       uint64        // holds written (Hold)
}

// New looks up the limit's bucket and returns a limiter on it.
func New(ctx context.Context, c Config) (*Limiter, error) {
	c.Limit = c.Limit.withDefaults()
	if err := c.Limit.validate(); err != nil {
		return nil, err
	}
	if c.JS == nil {
		return nil, fmt.Errorf("%w: no JetStream", ErrConfig)
	}
	kv, err := c.JS.KeyValue(ctx, c.Limit.Bucket)
	if err != nil {
		return nil, fmt.Errorf("looking up the rate limits' bucket %s: %w", c.Limit.Bucket, err)
	}
	return &Limiter{kv: kv, limit: c.Limit, unavailable: cmp.Or(c.Unavailable, 30*time.Second),
		timeout: cmp.Or(c.Timeout, 2*time.Second), backoff: cmp.Or(c.Backoff, 50*time.Millisecond)}, nil
}

// Limit is the limit l grants under.
func (l *Limiter) Limit() Limit { return l.limit }

// Stats returns l's counts.
func (l *Limiter) Stats() Stats {
	return Stats{Grants: l.grants.Load(), Waited: time.Duration(l.waitedNS.Load()),
		Conflicts: l.conflicts.Load(), Unreachable: l.unreachable.Load(), Holds: l.holds.Load()}
}

// Wait books the next free slot of the limit and returns at it. It returns ctx's error if
// ctx ends first (a slot booked is then left unused: the limit is never exceeded for
// it), ErrUnavailable when the bucket could not be reached for Config.Unavailable, and
// ErrState when the key holds something else.
func (l *Limiter) Wait(ctx context.Context) (Grant, error) {
	began := time.Now()
	var (
		at   time.Time
		wait time.Duration
		rev  uint64
	)
	err := l.retrying(ctx, "waiting for a slot of "+l.limit.Key, func(ctx context.Context) (err error) {
		at, wait, rev, err = l.book(ctx)
		return err
	})
	if err != nil {
		return Grant{}, err
	}
	if err := sleep(ctx, wait); err != nil {
		return Grant{}, fmt.Errorf("waiting %s for a slot of %s: %w", wait, l.limit.Key, err)
	}
	g := Grant{At: at, Waited: time.Since(began), Revision: rev}
	l.grants.Add(1)
	l.waitedNS.Add(int64(g.Waited))
	return g, nil
}

// Hold holds the limit for d: no call goes before d after the hold is written, by the
// NATS server's clock, for every instance that waits on the limit (a server's
// Retry-After). It never shortens a booking or a longer hold already there. d must be
// more than 0 and at most MaxHold, otherwise the error is ErrHold. It fails as Wait does
// when the bucket is out of reach or the key holds something else; a held limit is then
// not certain, and the caller waits d itself.
func (l *Limiter) Hold(ctx context.Context, d time.Duration) error {
	if d <= 0 || d > MaxHold {
		return fmt.Errorf("%w: %s of %s, it must be more than 0 and at most %s", ErrHold, d, l.limit.Key, MaxHold)
	}
	err := l.retrying(ctx, fmt.Sprintf("holding %s for %s", l.limit.Key, d), func(ctx context.Context) error {
		return l.hold(ctx, d)
	})
	if err != nil {
		return err
	}
	l.holds.Add(1)
	return nil
}

// retrying runs op, one read and compare-and-set of the key, until it is done: again at
// once when another instance wrote first, with backoff when the bucket could not be read
// or written, for up to l.unavailable. what says what the caller was doing, for errors.
func (l *Limiter) retrying(ctx context.Context, what string, op func(context.Context) error) error {
	var failing time.Time
	pause := l.backoff
	for {
		err := op(ctx)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("%s: %w", what, context.Cause(ctx))
		case errors.Is(err, errLost):
			l.conflicts.Add(1)
			continue // another instance wrote first: read its entry, at once
		case errors.Is(err, ErrState):
			return err
		}
		l.unreachable.Add(1)
		if failing.IsZero() {
			failing = time.Now()
		} else if time.Since(failing) >= l.unavailable {
			return fmt.Errorf("%w: %s for %s: %w", ErrUnavailable, l.limit.Bucket, time.Since(failing).Round(time.Millisecond), err)
		}
		if serr := sleep(ctx, pause); serr != nil {
			return fmt.Errorf("waiting for the bucket %s (%w): %w", l.limit.Bucket, err, serr)
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// errLost: another instance's booking or hold came first.
var errLost = errors.New("booking lost")

// book takes the slot after the latest booking with a compare-and-set on its revision,
// then reads its own entry back for the server's timestamp, from which the slot follows.
// It returns the slot, how long to wait for it from now, and the booking's revision.
func (l *Limiter) book(ctx context.Context) (at time.Time, wait time.Duration, rev uint64, err error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	key := l.limit.Key
	next := state{Interval: l.limit.Interval(), Burst: l.limit.Burst}
	last, err := l.read(ctx, &next)
	if err != nil {
		return at, 0, 0, err
	}
	rev, err = l.write(ctx, last, next)
	if err != nil {
		return at, 0, 0, err
	}
	// The write reached the server before its ack reached us: waiting from now for the
	// slot's distance from the write's timestamp never goes early.
	acked := time.Now()
	own, err := l.kv.GetRevision(ctx, key, rev)
	if err != nil {
		// The slot is booked but its time unknown: it stays unused, the next try books another.
		return at, 0, 0, fmt.Errorf("reading back booking %d of %s: %w", rev, key, err)
	}
	at, _ = next.slot(own.Created())
	return at, at.Sub(own.Created()) - time.Since(acked), rev, nil
}

// hold writes a hold of d after the latest entry with a compare-and-set on its revision.
// Unlike a booking it needs no read-back: its end is its own timestamp plus d, which
// every reader computes from the entry.
func (l *Limiter) hold(ctx context.Context, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	next := state{Interval: l.limit.Interval(), Burst: l.limit.Burst, Hold: d}
	last, err := l.read(ctx, &next)
	if err != nil {
		return err
	}
	_, err = l.write(ctx, last, next)
	return err
}

// read reads the latest entry of the key (nil when there is none) and carries its
// booking and hold into next.
func (l *Limiter) read(ctx context.Context, next *state) (jetstream.KeyValueEntry, error) {
	key := l.limit.Key
	last, err := l.kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading %s: %w", key, err)
	}
	s, err := decodeState(key, last.Value())
	if err != nil {
		return nil, err
	}
	next.BookedUntil, next.HoldUntil = s.after(last.Created())
	return last, nil
}

// write stores next in place of last (nil: the first entry) with a compare-and-set, and
// returns its revision; errLost when another instance wrote first.
func (l *Limiter) write(ctx context.Context, last jetstream.KeyValueEntry, next state) (rev uint64, err error) {
	key := l.limit.Key
	b, err := json.Marshal(next)
	if err != nil {
		return 0, err
	}
	if last == nil {
		rev, err = l.kv.Create(ctx, key, b)
		if errors.Is(err, jetstream.ErrKeyExists) {
			return 0, errLost
		}
	} else {
		rev, err = l.kv.Update(ctx, key, b, last.Revision())
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return 0, errLost
		}
	}
	if err != nil {
		return 0, fmt.Errorf("writing %s: %w", key, err)
	}
	return rev, nil
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}
