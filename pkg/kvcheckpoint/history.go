package kvcheckpoint

import (
	"context"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/cairnhq/cairn/pkg/identity"
)

// History. A signature says who wrote a record, not that it is the newest: a user that may
// write the bucket could put an earlier revision's bytes back (the bucket keeps 16), and
// every signature in it would still hold. So each record carries, inside what its sum and
// signature cover, the revision it was written over (prev; 0 for a run's first record), and
// every write is a compare-and-set whose expected revision the server checks and keeps with
// the message, in the header Nats-Expected-Last-Subject-Sequence. A reader that trusts
// records (a Store with a ring) takes one only when the two agree: the server vouches that
// the key's real previous revision was prev, the writer's signature that it meant to write
// over prev. An old record put back carries an old prev, which no compare-and-set the server
// accepts now can match; a plain put carries no expectation at all. Either is
// ErrRolledBack, and a damaged record (ErrCorrupt, ErrForged): never acted on, handed over.
//
// A record of an earlier schema has no prev: it is taken only at or below the seal's
// history revision (identity.Seal.History), recorded by the cairn init that first ran a
// release that writes prev; the first write since makes it a chained one.

// hdrOver is the header in which the server keeps the revision a compare-and-set write was
// made over (nats.go's KV Create and Update set it; the server refuses the write unless the
// key's last revision is that one, and stores the header with the message).
const hdrOver = "Nats-Expected-Last-Subject-Sequence"

// historySchema is the first schema whose records carry prev.
const historySchema = 6

// over reads the revision a stored message was written over; known is false when the write
// named none (a plain put).
func over(h nats.Header) (rev uint64, known bool) {
	v := h.Get(hdrOver)
	if v == "" {
		return 0, false
	}
	n, err := strconv.ParseUint(v, 10, 64)
	return n, err == nil
}

// checkHistory refuses a record, read at st.rev and stored in schema, that is not the
// newest write of its own history (above). Without a ring nothing is checked, as for
// signatures.
func (s *Store) checkHistory(r *Record, schema int, st revision) error {
	if s.ring == nil {
		return nil
	}
	if schema < historySchema {
		if st.rev != 0 && st.rev <= s.ring.Seal().History {
			return nil // written by an earlier release, before records were chained
		}
		return fmt.Errorf("checkpoint %q at revision %d: %w: %w: %w: schema %d (no prev) written after the seal's history revision %d",
			r.RunID, st.rev, ErrCorrupt, ErrForged, ErrRolledBack, schema, s.ring.Seal().History)
	}
	if !st.known {
		return fmt.Errorf("checkpoint %q at revision %d: %w: %w: %w: written with no compare-and-set (the record says it was written over revision %d)",
			r.RunID, st.rev, ErrCorrupt, ErrForged, ErrRolledBack, r.Prev)
	}
	if st.over != r.Prev {
		return fmt.Errorf("checkpoint %q at revision %d: %w: %w: %w: written over revision %d, the record says %d",
			r.RunID, st.rev, ErrCorrupt, ErrForged, ErrRolledBack, st.over, r.Prev)
	}
	return nil
}

// storedAt reads the message of the run's record at revision rev from the stream's leader,
// for a watcher's entry, which carries no headers.
func (s *Store) storedAt(ctx context.Context, runID string, rev uint64) (revision, error) {
	m, err := s.leaderGet(ctx, msgGet{Seq: rev})
	if err != nil {
		return revision{}, fmt.Errorf("reading checkpoint %q at revision %d: %w", runID, rev, err)
	}
	if m == nil {
		return revision{}, fmt.Errorf("reading checkpoint %q at revision %d: %w", runID, rev, ErrNotFound)
	}
	return *m, nil
}

// Links remembers, for one watcher of the bucket, the last revision it saw of each run, so
// that its next entry of that run, written over exactly that revision, needs no read of the
// message's header: a watch delivers every revision in order, so the one seen last is the
// key's real previous revision. Any other entry is checked against its stored header. Not
// safe for concurrent use: one per watch loop.
type Links struct{ last map[string]uint64 }

// DecodeWatched is DecodeEntry for a watch loop that sees every revision in order (a KV
// watch), remembering in l what it saw.
func (s *Store) DecodeWatched(ctx context.Context, l *Links, key string, b []byte, rev uint64) (*Record, error) {
	if l.last == nil {
		l.last = map[string]uint64{}
	}
	prev, seen := l.last[key]
	l.last[key] = rev
	if !seen || prev >= rev {
		return s.DecodeEntry(ctx, key, b, rev)
	}
	r, schema, err := s.decodeValue(key, b)
	if err != nil {
		return nil, err
	}
	return s.checked(ctx, r, schema, revision{value: b, rev: rev, over: prev, known: true})
}

// approvalSigMax bounds an approval's signature as read: an ed25519 signature is 86
// characters of unpadded base64.
const approvalSigMax = 128

// checkApproval refuses a record whose approval was given by anyone but the approver it
// names: a record of schema 6 on carries the approver's signature of the plan (approval's
// sig, which the supervisor took from the signed approve), and a reader with a ring checks it
// again against the registered approvers. So a writer who may write the record, even the
// holder of its lease with a service's seed, cannot approve a plan: it has no approver's
// seed. A record of an earlier schema is taken as its history check allows (checkHistory).
func (s *Store) checkApproval(ctx context.Context, r *Record, schema int) error {
	a := r.Approval
	if s.ring == nil || schema < historySchema || a == nil || (a.By == nil && a.Sig == nil) {
		return nil
	}
	switch {
	case a.By == nil:
		return fmt.Errorf("checkpoint %q: %w: %w: an approval signature with no approver", r.RunID, ErrCorrupt, ErrForged)
	case a.Sig == nil:
		return fmt.Errorf("checkpoint %q: %w: %w: the approval by %q carries no approver's signature", r.RunID, ErrCorrupt, ErrForged, CutText(*a.By, 64))
	case len(*a.Sig) > approvalSigMax || len(*a.By) > planByLen:
		return fmt.Errorf("checkpoint %q: %w: %w: an approval's signature of %d bytes", r.RunID, ErrCorrupt, ErrForged, len(*a.Sig))
	}
	sig := &identity.Sig{By: *a.By, Sig: *a.Sig}
	if err := s.ring.VerifyApprover(ctx, identity.ApprovalMessage(r.RunID, a.PlanDigest), sig); err != nil {
		return fmt.Errorf("checkpoint %q: %w: %w: the approval by %q: %w", r.RunID, ErrCorrupt, ErrForged, CutText(*a.By, 64), err)
	}
	return nil
}

// Revision is one kept revision of a run's record, checked as a load checks it, alone: Err
// when it fails (its sum, signature, history or approval).
type Revision struct {
	Rev uint64
	Rec *Record
	Err error
}

// History returns the run's kept revisions (the bucket keeps 16), oldest first, each read
// from the stream's leader and checked as a load checks it: for the supervisor's start, which
// judges the links written while no supervisor watched (Roles.Changed).
func (s *Store) History(ctx context.Context, runID string) ([]Revision, error) {
	revs, err := s.revisions(ctx, runID, 0)
	if err != nil {
		return nil, fmt.Errorf("reading the history of checkpoint %q: %w", runID, err)
	}
	out := make([]Revision, 0, len(revs))
	for _, r := range revs {
		if r.op != "" {
			continue
		}
		rec, err := s.decodeStoredMsg(ctx, runID, r)
		out = append(out, Revision{Rev: r.rev, Rec: rec, Err: err})
	}
	return out, nil
}
