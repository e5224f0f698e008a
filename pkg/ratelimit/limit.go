package ratelimit

import (
	"cmp"
	"fmt"
	"regexp"
	"time"
)

// Limit is a declared limit of an outside system: at most PerSecond calls a second,
// Burst of them at once after a quiet spell, shared by every instance that waits on the
// same Bucket and Key.
type Limit struct {
	Bucket    string  `json:"bucket"`     // the JetStream KV bucket that keeps the state
	Key       string  `json:"key"`        // one key per limit
	PerSecond float64 `json:"per_second"` // calls per second
	Burst     int     `json:"burst"`      // calls granted at once after a quiet spell; default 1
}

var keyName = regexp.MustCompile(`^[-_a-zA-Z0-9]+$`)

func (l Limit) withDefaults() Limit {
	l.Burst = cmp.Or(l.Burst, 1)
	return l
}

func (l Limit) validate() error {
	switch {
	case l.Bucket == "":
		return fmt.Errorf("%w: the limit names no bucket", ErrConfig)
	case !keyName.MatchString(l.Key):
		return fmt.Errorf("%w: key %q must be letters, digits, - and _", ErrConfig, l.Key)
	case !(l.PerSecond > 0) || l.PerSecond > 1e9:
		return fmt.Errorf("%w: %s must allow a positive number of calls per second up to 1e9, not %v", ErrConfig, l.Key, l.PerSecond)
	case l.Burst < 1:
		return fmt.Errorf("%w: %s's burst must be at least 1, not %d", ErrConfig, l.Key, l.Burst)
	}
	return nil
}

// Interval is the time between two calls at the declared rate.
func (l Limit) Interval() time.Duration {
	return time.Duration(float64(time.Second) / l.PerSecond)
}

// MostIn is the most calls the limit grants within any window of length d (counted by the
// NATS server's clock): the burst, and one more each interval.
func (l Limit) MostIn(d time.Duration) int {
	l = l.withDefaults()
	return l.Burst + int(d/l.Interval())
}

// String says how the limit holds, for a person (cairn faultmap).
func (l Limit) String() string {
	l = l.withDefaults()
	return fmt.Sprintf("%g calls per second, burst %d, shared by every instance (KV %s, key %s, by the NATS server's clock; waiting is not part of the call)",
		l.PerSecond, l.Burst, l.Bucket, l.Key)
}
