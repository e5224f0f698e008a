package kvcheckpoint

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nuid"
)

// Owner identifies a worker process: its name and the inbox it answers on.
type Owner struct {
	Name  string // <service>/<host>/<pid>
	Inbox string // <root>owner.<service>.<nuid> (package lease): cairn.owner.<service>.<nuid> for the night
}

// ErrConflict: the record changed since it was read; re-read and decide again.
var ErrConflict = errors.New("checkpoint changed since read")

// Holder is the holder of a run's lease: the one goroutine of an attempt that writes the record.
// Its methods are safe for the heartbeat and the attempt to call concurrently.
type Holder struct {
	store *Store
	runID string
	owner Owner
	token uint64

	mu  sync.Mutex
	rev uint64
	rec *Record
}

// Take writes a lease for step on the record read at rev, so the token is rev. prepare
// applies the taker's own changes (step in_progress, restart bookkeeping) in the same write.
// ErrConflict means the record changed: re-read and decide again.
func (s *Store) Take(ctx context.Context, rec *Record, rev uint64, owner Owner, step string, prepare func(r *Record)) (*Holder, error) {
	if l := rec.Lease; l != nil {
		// A lease is taken only when none stands; releasing a dead or expired owner's lease
		// is its own write (the supervisor's, or a fast takeover's).
		return nil, fmt.Errorf("taking lease of %q: %s holds it with token %d: %w", rec.RunID, l.Owner, l.Token, ErrLeaseHeld)
	}
	next := rec.Clone()
	next.Lease = &Lease{Owner: owner.Name, OwnerInbox: owner.Inbox, Token: rev, Step: step, WriteID: writeID()}
	if prepare != nil {
		prepare(next)
	}
	s.stamp(rec, next, rev)
	b, _, err := s.encodeFit(ctx, next)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, writeTimeout)
	newRev, err := s.kv.Update(wctx, rec.RunID, b, rev)
	cancel()
	if err != nil {
		if !s.retryable(err) {
			return nil, fmt.Errorf("taking lease of %q: %w", rec.RunID, err)
		}
		landed, r, lrev, _ := s.since(ctx, rec.RunID, rev, b)
		if !landed || r == nil {
			return nil, fmt.Errorf("taking lease of %q at revision %d: %w", rec.RunID, rev, ErrConflict)
		}
		next, newRev = r, lrev
	}
	return &Holder{store: s, runID: rec.RunID, owner: owner, token: rev, rev: newRev, rec: next}, nil
}

// Token is the fencing token: the revision the lease was taken on.
func (h *Holder) Token() uint64 { return h.token }

// Record returns a copy of the record as last written or read by the holder.
func (h *Holder) Record() (*Record, uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rec.Clone(), h.rev
}

// Write applies fn to the holder's record and writes it by compare-and-set with a fresh
// write_id. On a conflict or a lost answer it re-reads: the very record it wrote means the
// write landed; its own owner and token with other changes mean fn is applied again on the
// new revision; another token, or no lease, is ErrFenced, and the holder must stop.
func (h *Holder) Write(ctx context.Context, fn func(r *Record) error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for {
		if l := h.rec.Lease; l == nil || l.Owner != h.owner.Name || l.Token != h.token {
			return fmt.Errorf("checkpoint %q: lease %s, mine %s/%d: %w", h.runID, describe(l), h.owner.Name, h.token, ErrFenced)
		}
		next := h.rec.Clone()
		if err := fn(next); err != nil {
			return err
		}
		if next.Lease != nil {
			next.Lease.WriteID = writeID()
		}
		h.store.stamp(h.rec, next, h.rev)
		b, size, err := h.store.encodeFit(ctx, next)
		if err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, writeTimeout)
		newRev, err := h.store.kv.Update(wctx, h.runID, b, h.rev)
		cancel()
		if err == nil {
			h.rec, h.rev = next, newRev
			if next.Lease == nil { // a release: it may schedule the next step
				h.store.written.put(h.runID, newRev, next, size)
			}
			return nil
		}
		if !h.store.retryable(err) {
			return fmt.Errorf("writing checkpoint %q: %w", h.runID, err)
		}
		landed, cur, rev, lerr := h.store.since(ctx, h.runID, h.rev, b)
		if lerr != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return lerr
		}
		if landed {
			// Later writers (a cancel, the supervisor) may have written after it; the
			// holder goes on from the latest record.
			h.rec, h.rev = cur, rev
			return nil
		}
		if cur.Lease == nil || cur.Lease.Owner != h.owner.Name || cur.Lease.Token != h.token {
			return fmt.Errorf("checkpoint %q: lease %s, mine %s/%d: %w", h.runID, describe(cur.Lease), h.owner.Name, h.token, ErrFenced)
		}
		h.rec, h.rev = cur, rev
	}
}

// Renew writes a fresh write_id: the heartbeat, which is not progress (progressed_at stays).
func (h *Holder) Renew(ctx context.Context) error {
	return h.Write(ctx, func(*Record) error { return nil })
}

// Release applies fn and clears the lease in the same write. After it the holder owns nothing.
func (h *Holder) Release(ctx context.Context, fn func(r *Record) error) error {
	return h.Write(ctx, func(r *Record) error {
		if fn != nil {
			if err := fn(r); err != nil {
				return err
			}
		}
		r.Lease = nil
		return nil
	})
}

func describe(l *Lease) string {
	if l == nil {
		return "none"
	}
	return fmt.Sprintf("%s/%d", l.Owner, l.Token)
}

func writeID() string { return "w-" + nuid.Next() }
