package ratelimit

import (
	"encoding/json"
	"fmt"
	"time"
)

// state is the value of a limit's key: the booking one grant made, complete in itself.
// The grant's own time is not in it: it is the server's timestamp of the entry that holds
// it (jetstream.KeyValueEntry.Created), so every instance judges by one clock, the stream
// leader's, and none by its own.
type state struct {
	// BookedUntil is when the earlier grants left the limit free again (their theoretical
	// arrival time): zero for the first grant.
	BookedUntil time.Time `json:"booked_until"`
	// Interval and Burst are the limit this grant was made under, so that every reader
	// computes the same slot from the entry even when instances disagree about the limit.
	Interval time.Duration `json:"interval_ns"`
	Burst    int           `json:"burst"`
}

// slot is when the call this entry granted may go, and until when the limit is booked
// after it, for an entry written at the server's time written (generic cell rate
// algorithm: a call joins the queue at max(booked, written), books one interval, and may
// go up to Burst-1 intervals ahead of the queue's end).
func (s state) slot(written time.Time) (at, booked time.Time) {
	start := written
	if s.BookedUntil.After(start) {
		start = s.BookedUntil
	}
	booked = start.Add(s.Interval)
	at = booked.Add(-time.Duration(s.Burst) * s.Interval)
	if at.Before(written) {
		at = written
	}
	return at, booked
}

func decodeState(key string, b []byte) (state, error) {
	var s state
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("%w: key %s: %w", ErrState, key, err)
	}
	if s.Interval <= 0 || s.Burst < 1 {
		return s, fmt.Errorf("%w: key %s holds interval %s, burst %d", ErrState, key, s.Interval, s.Burst)
	}
	return s, nil
}
