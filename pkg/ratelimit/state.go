package ratelimit

import (
	"encoding/json"
	"fmt"
	"time"
)

// state is the value of a limit's key: the booking one grant made, or a hold, complete in
// itself. The entry's own time is not in it: it is the server's timestamp of the entry
// that holds it (jetstream.KeyValueEntry.Created), so every instance judges by one clock,
// the stream leader's, and none by its own.
type state struct {
	// BookedUntil is when the earlier grants left the limit free again (their theoretical
	// arrival time): zero for the first grant.
	BookedUntil time.Time `json:"booked_until"`
	// Interval and Burst are the limit this entry was written under, so that every reader
	// computes the same slot from the entry even when instances disagree about the limit.
	Interval time.Duration `json:"interval_ns"`
	Burst    int           `json:"burst"`
	// HoldUntil is the end of the latest hold written before this entry, while it was still
	// ahead (zero otherwise): no call goes before it.
	HoldUntil time.Time `json:"hold_until,omitzero"`
	// Hold marks an entry that grants no call but holds the limit: no call goes before
	// the entry's own timestamp plus Hold. Zero in a booking.
	Hold time.Duration `json:"hold_ns,omitempty"`
}

// slot is when the call a booking granted may go, and until when the limit is booked
// after it, for an entry written at the server's time written (generic cell rate
// algorithm: a call joins the queue at max(booked, written), books one interval, and may
// go up to Burst-1 intervals ahead of the queue's end), never before a hold's end.
func (s state) slot(written time.Time) (at, booked time.Time) {
	start := later(s.BookedUntil, written)
	booked = start.Add(s.Interval)
	at = booked.Add(-time.Duration(s.Burst) * s.Interval)
	return later(at, written, s.HoldUntil), booked
}

// after is until when the limit is booked, and held, after an entry written at written:
// what the next entry carries. A hold books the limit up to its end, so that the calls
// after it keep their intervals from there (they may still go a burst at once at the end,
// since the limit was quiet), and it never shortens a booking or a hold already there.
func (s state) after(written time.Time) (booked, held time.Time) {
	if s.Hold > 0 {
		end := written.Add(s.Hold)
		return later(s.BookedUntil, end), later(s.HoldUntil, end)
	}
	_, booked = s.slot(written)
	held = s.HoldUntil
	if !held.After(written) {
		held = time.Time{} // over: the entries after it need not carry it
	}
	return booked, held
}

// later is the latest of ts.
func later(t time.Time, ts ...time.Time) time.Time {
	for _, u := range ts {
		if u.After(t) {
			t = u
		}
	}
	return t
}

func decodeState(key string, b []byte) (state, error) {
	var s state
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("%w: key %s: %w", ErrState, key, err)
	}
	if s.Interval <= 0 || s.Burst < 1 {
		return s, fmt.Errorf("%w: key %s holds interval %s, burst %d", ErrState, key, s.Interval, s.Burst)
	}
	if s.Hold < 0 || s.Hold > MaxHold {
		return s, fmt.Errorf("%w: key %s holds a hold of %s, beyond 0 to %s", ErrState, key, s.Hold, MaxHold)
	}
	return s, nil
}
