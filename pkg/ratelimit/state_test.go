package ratelimit

import (
	"encoding/json"
	"testing"
	"time"
)

// A hold carries its end forward as a maximum: it never shortens a booking or an earlier
// longer hold, no slot goes before it, and it is dropped once an entry is written after it.
func TestHoldState(t *testing.T) {
	w := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	const i = 100 * time.Millisecond
	at := func(d time.Duration) time.Time { return w.Add(d) }
	for _, c := range []struct {
		name         string
		s            state
		booked, held time.Time
	}{
		{"a hold on an idle limit", state{Interval: i, Burst: 1, Hold: time.Second}, at(time.Second), at(time.Second)},
		{"a hold short of a booking", state{BookedUntil: at(5 * time.Second), Interval: i, Burst: 1, Hold: time.Second},
			at(5 * time.Second), at(time.Second)},
		{"a hold short of an earlier hold", state{BookedUntil: at(9 * time.Second), HoldUntil: at(9 * time.Second), Interval: i, Burst: 1, Hold: time.Second},
			at(9 * time.Second), at(9 * time.Second)},
		{"a booking under a hold", state{BookedUntil: at(time.Second), HoldUntil: at(time.Second), Interval: i, Burst: 1},
			at(time.Second + i), at(time.Second)},
		{"a booking after a hold ended", state{BookedUntil: at(-time.Second), HoldUntil: at(-time.Second), Interval: i, Burst: 1},
			at(i), time.Time{}},
	} {
		booked, held := c.s.after(w)
		if !booked.Equal(c.booked) || !held.Equal(c.held) {
			t.Errorf("%s: booked until %s, held until %s; want %s, %s", c.name, booked, held, c.booked, c.held)
		}
	}
	// A burst under a hold goes at its end, not the burst's intervals before it.
	s := state{BookedUntil: at(time.Second), HoldUntil: at(time.Second), Interval: i, Burst: 3}
	if got, _ := s.slot(w); !got.Equal(at(time.Second)) {
		t.Errorf("a burst's slot under a hold ending at %s: %s", at(time.Second), got)
	}
}

// A booking without a hold is written as before holds existed, and an entry of that form
// reads with no hold: instances agree on the entries during an upgrade.
func TestStateWithoutHoldIsUnchanged(t *testing.T) {
	s := state{BookedUntil: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC), Interval: time.Second, Burst: 1}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"booked_until":"2026-12-02T10:00:00Z","interval_ns":1000000000,"burst":1}`
	if string(b) != want {
		t.Errorf("a booking encodes as %s, want %s", b, want)
	}
	got, err := decodeState("api", []byte(want))
	if err != nil || got != s {
		t.Errorf("decoding %s: %+v, %v", want, got, err)
	}
	if _, err := decodeState("api", []byte(`{"interval_ns":1000000000,"burst":1,"hold_ns":-1}`)); err == nil {
		t.Error("a negative hold decodes")
	}
}
