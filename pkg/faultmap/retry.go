package faultmap

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cairnhq/cairn/internal/loopguard"
	"github.com/cairnhq/cairn/internal/retrypolicy"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/retry"
)

// Retry is a step's retry policy under the settings, and its worst case for one item
// (see the package documentation). Times are in milliseconds and leave out the calls' own
// time. Each wait is drawn within ±Jitter of its base (the *_bounds_ms, low and high).
type Retry struct {
	TriesPerAttempt    int        `json:"tries_per_attempt"`     // calls of one item in one attempt
	TryBackoffMS       []int64    `json:"try_backoff_ms"`        // the waits between those calls, before jitter
	TryBackoffBoundsMS [][2]int64 `json:"try_backoff_bounds_ms"` // and the range each is drawn from
	Attempts           int        `json:"attempts"`              // attempts that run before the handover
	// ProgressCounted: the loop guard counts attempts without progress (what the step made
	// durable, read back), so a step that progresses runs past LoopGuard attempts, bounded
	// then by MaxDeliver (temporary failures) and the reassignment limit (crashes).
	ProgressCounted        bool       `json:"progress_counted"`
	AttemptBackoffMS       []int64    `json:"attempt_backoff_ms"`        // the NakWithDelay between attempts, before jitter
	AttemptBackoffBoundsMS [][2]int64 `json:"attempt_backoff_bounds_ms"` // and the range each is drawn from
	Jitter                 float64    `json:"jitter"`                    // the policies' jitter, ±fraction of each wait
	WorstCalls             int        `json:"worst_case_calls"`          // calls of one item while every call fails
	WorstMS                int64      `json:"worst_case_ms"`             // from its first call to its last, every wait at its longest
	CrashCapCalls          int        `json:"crash_cap_calls"`           // calls of one item on one step event, crashes included
	PeakPerSecond          int        `json:"peak_calls_per_second"`
	// RateLimit is the setting that declares the outside system's calls per second, and
	// RateLimitPerSecond its value; empty and 0 when the step declares none.
	RateLimit          string  `json:"rate_limit"`
	RateLimitPerSecond float64 `json:"rate_limit_per_second"`
	// SharedLimit is how every instance keeps the rate limit together (ratelimit.Limit's
	// String); empty when each process keeps it alone, or none is declared.
	SharedLimit string `json:"shared_limit"`
}

// Policies are the runner's retry policies under s: the same functions Attempt.Retry and
// the attempt backoff use (package runner), not copies.
func Policies(s Settings) (item, attempt retry.Policy) {
	return retrypolicy.Item(s.RetryAttempts), retrypolicy.Attempt()
}

// retryOf works out st's retry policy and its worst case under s.
func retryOf(st pipeline.Step, s Settings) (Retry, error) {
	counted := slices.Contains(s.ProgressSteps, st.Name)
	r := Retry{TriesPerAttempt: 1, Attempts: min(loopguard.Attempts(s.LoopGuard, counted), s.MaxDeliver-1), ProgressCounted: counted,
		TryBackoffMS: []int64{}, AttemptBackoffMS: []int64{}, TryBackoffBoundsMS: [][2]int64{}, AttemptBackoffBoundsMS: [][2]int64{}}
	if st.ItemRetries {
		r.TriesPerAttempt = s.RetryAttempts
	}
	if st.RateLimit != "" {
		rps, ok := s.RateLimits[st.RateLimit]
		if !ok {
			return Retry{}, fmt.Errorf("step %s names rate limit %s, which the settings do not give", st.Name, st.RateLimit)
		}
		r.RateLimit, r.RateLimitPerSecond = st.RateLimit, rps
		if l, ok := s.SharedLimits[st.RateLimit]; ok {
			r.SharedLimit = l.String()
		}
	}
	// The schedule of one item's calls, from its first, every call failing at once: at the
	// shortest waits for the peak, at the longest for the worst time.
	item, attempt := Policies(s)
	r.Jitter = item.Jitter
	var calls []time.Duration
	var at, longest time.Duration
	for a := range r.Attempts {
		if a > 0 {
			lo, hi := attempt.Bounds(a)
			r.AttemptBackoffMS = append(r.AttemptBackoffMS, attempt.Base(a).Milliseconds())
			r.AttemptBackoffBoundsMS = append(r.AttemptBackoffBoundsMS, [2]int64{lo.Milliseconds(), hi.Milliseconds()})
			at, longest = at+lo, longest+hi
		}
		for t := range r.TriesPerAttempt {
			if t > 0 {
				lo, hi := item.Bounds(t - 1)
				if a == 0 {
					r.TryBackoffMS = append(r.TryBackoffMS, item.Base(t-1).Milliseconds())
					r.TryBackoffBoundsMS = append(r.TryBackoffBoundsMS, [2]int64{lo.Milliseconds(), hi.Milliseconds()})
				}
				at, longest = at+lo, longest+hi
			}
			calls = append(calls, at)
		}
	}
	r.WorstCalls = len(calls)
	r.WorstMS = longest.Milliseconds()
	r.CrashCapCalls = r.TriesPerAttempt * (s.MaxDeliver - 1)
	r.PeakPerSecond = peak(calls, time.Second)
	return r, nil
}

// peak is the most of the sorted times that fall within any window shorter than w.
func peak(times []time.Duration, w time.Duration) int {
	best, first := 0, 0
	for i, t := range times {
		for t-times[first] >= w {
			first++
		}
		best = max(best, i-first+1)
	}
	return best
}

// ranges renders ranges of milliseconds: "90ms–110ms, 180ms–220ms"; "none" for none.
func ranges(ms [][2]int64) string {
	if len(ms) == 0 {
		return "none"
	}
	out := make([]string, len(ms))
	for i, v := range ms {
		out[i] = (time.Duration(v[0]) * time.Millisecond).String() + "–" + (time.Duration(v[1]) * time.Millisecond).String()
	}
	return strings.Join(out, ", ")
}

// durations renders milliseconds as durations: "100ms, 200ms"; "none" for none.
func durations(ms []int64) string {
	if len(ms) == 0 {
		return "none"
	}
	out := make([]string, len(ms))
	for i, v := range ms {
		out[i] = (time.Duration(v) * time.Millisecond).String()
	}
	return strings.Join(out, ", ")
}
