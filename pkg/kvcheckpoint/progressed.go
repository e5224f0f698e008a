package kvcheckpoint

import (
	"reflect"
	"time"
)

// Progressed reports whether after is progress over before: whether it differs in anything
// but the time of the write (updated_at, progressed_at), the sum and the lease's write_id.
// A lease renewal, or a write that sets again what the record already says (a supervisor
// publishing a step's event again with the same next_action), is not progress; a step's
// commit or verdict, a status change, a lease taken or released, a command waiting or
// carried out, a parked item or a counter are. The store sets progressed_at by this rule on
// every write, and the supervisor's stall timeouts judge a run by it.
func Progressed(before, after *Record) bool {
	if before == nil || after == nil {
		return before != after
	}
	if !sameLease(before.Lease, after.Lease) {
		return true
	}
	b, a := *before, *after // shallow copies: only their own top-level fields are cleared
	b.UpdatedAt, a.UpdatedAt = "", ""
	b.ProgressedAt, a.ProgressedAt = "", ""
	b.Sum, a.Sum = "", ""
	b.Lease, a.Lease = nil, nil
	return !reflect.DeepEqual(b, a)
}

func sameLease(x, y *Lease) bool {
	if x == nil || y == nil {
		return x == y
	}
	return x.Owner == y.Owner && x.OwnerInbox == y.OwnerInbox && x.Token == y.Token && x.Step == y.Step
}

// stamp marks r, about to be written over prev (nil for a run's first write): the current
// schema (a record read in an earlier one was upgraded in memory), the time of the write,
// progressed_at when the write is progress (Progressed), and approval.since when the write
// begins an approval's wait (an approval without a since).
func (s *Store) stamp(prev, r *Record) {
	now := s.now().UTC().Format(time.RFC3339Nano)
	r.Schema = Schema
	r.UpdatedAt = now
	if prev == nil || Progressed(prev, r) {
		r.ProgressedAt = now
	}
	if a := r.Approval; a != nil && a.Since == "" {
		a.Since = now
	}
}
