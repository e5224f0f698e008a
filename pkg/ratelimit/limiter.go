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
	Conflicts   uint64        // bookings lost to another instance's (and tried again)
	Unreachable uint64        // reads or writes of the bucket that failed
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
		Conflicts: l.conflicts.Load(), Unreachable: l.unreachable.Load()}
}

// Wait books the next free slot of the limit and returns at it. It returns ctx's error if
// ctx ends first (a slot booked is then left unused: the limit is never exceeded for
// it), ErrUnavailable when the bucket could not be reached for Config.Unavailable, and
// ErrState when the key holds something else.
func (l *Limiter) Wait(ctx context.Context) (Grant, error) {
	began := time.Now()
	var failing time.Time
	pause := l.backoff
	for {
		at, wait, rev, err := l.book(ctx)
		if err == nil {
			if err := sleep(ctx, wait); err != nil {
				return Grant{}, fmt.Errorf("waiting %s for a slot of %s: %w", wait, l.limit.Key, err)
			}
			g := Grant{At: at, Waited: time.Since(began), Revision: rev}
			l.grants.Add(1)
			l.waitedNS.Add(int64(g.Waited))
			return g, nil
		}
		switch {
		case ctx.Err() != nil:
			return Grant{}, fmt.Errorf("waiting for a slot of %s: %w", l.limit.Key, context.Cause(ctx))
		case errors.Is(err, errLost):
			l.conflicts.Add(1)
			continue // another instance booked first: read its booking, at once
		case errors.Is(err, ErrState):
			return Grant{}, err
		}
		l.unreachable.Add(1)
		if failing.IsZero() {
			failing = time.Now()
		} else if time.Since(failing) >= l.unavailable {
			return Grant{}, fmt.Errorf("%w: %s for %s: %w", ErrUnavailable, l.limit.Bucket, time.Since(failing).Round(time.Millisecond), err)
		}
		if serr := sleep(ctx, pause); serr != nil {
			return Grant{}, fmt.Errorf("waiting for the bucket %s (%w): %w", l.limit.Bucket, err, serr)
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// errLost: another instance's booking came first.
var errLost = errors.New("booking lost")

// book takes the slot after the latest booking with a compare-and-set on its revision,
// then reads its own entry back for the server's timestamp, from which the slot follows.
// It returns the slot, how long to wait for it from now, and the booking's revision.
func (l *Limiter) book(ctx context.Context) (at time.Time, wait time.Duration, rev uint64, err error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	key := l.limit.Key
	next := state{Interval: l.limit.Interval(), Burst: l.limit.Burst}
	last, err := l.kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		last = nil
	case err != nil:
		return at, 0, 0, fmt.Errorf("reading %s: %w", key, err)
	default:
		s, err := decodeState(key, last.Value())
		if err != nil {
			return at, 0, 0, err
		}
		_, next.BookedUntil = s.slot(last.Created())
	}
	b, err := json.Marshal(next)
	if err != nil {
		return at, 0, 0, err
	}
	if last == nil {
		rev, err = l.kv.Create(ctx, key, b)
		if errors.Is(err, jetstream.ErrKeyExists) {
			return at, 0, 0, errLost
		}
	} else {
		rev, err = l.kv.Update(ctx, key, b, last.Revision())
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return at, 0, 0, errLost
		}
	}
	if err != nil {
		return at, 0, 0, fmt.Errorf("booking %s: %w", key, err)
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
