package faultmap

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/runner"
)

// Retry is a step's retry policy under the settings, and its worst case for one item
// (see the package documentation). Times are in milliseconds and leave out the calls' own
// time.
type Retry struct {
	TriesPerAttempt int     `json:"tries_per_attempt"` // calls of one item in one attempt
	TryBackoffMS    []int64 `json:"try_backoff_ms"`    // the waits between those calls
	Attempts        int     `json:"attempts"`          // attempts that run before the handover
	// ProgressCounted: the loop guard counts attempts without progress (what the step made
	// durable, read back), so a step that progresses runs past LoopGuard attempts, bounded
	// then by MaxDeliver (temporary failures) and the reassignment limit (crashes).
	ProgressCounted  bool    `json:"progress_counted"`
	AttemptBackoffMS []int64 `json:"attempt_backoff_ms"` // the NakWithDelay between attempts
	WorstCalls       int     `json:"worst_case_calls"`   // calls of one item while every call fails
	WorstMS          int64   `json:"worst_case_ms"`      // from its first call to its last
	CrashCapCalls    int     `json:"crash_cap_calls"`    // calls of one item on one step event, crashes included
	PeakPerSecond    int     `json:"peak_calls_per_second"`
	// RateLimit is the setting that declares the outside system's calls per second, and
	// RateLimitPerSecond its value; empty and 0 when the step declares none.
	RateLimit          string  `json:"rate_limit"`
	RateLimitPerSecond float64 `json:"rate_limit_per_second"`
}

// firstTryBackoff is Attempt.Retry's first wait; each next one doubles it.
const firstTryBackoff = 100 * time.Millisecond

// attemptBackoff is the runner's NakWithDelay after an attempt failed, when the step has
// failed n attempts (pkg/runner/failure.go, backoff): 1s<<n, at most 30s.
func attemptBackoff(n int) time.Duration {
	return min(time.Second<<min(n, 5), 30*time.Second)
}

// retryOf works out st's retry policy and its worst case under s.
func retryOf(st pipeline.Step, s Settings) (Retry, error) {
	counted := slices.Contains(s.ProgressSteps, st.Name)
	r := Retry{TriesPerAttempt: 1, Attempts: min(runner.GuardAttempts(s.LoopGuard, counted), s.MaxDeliver-1), ProgressCounted: counted,
		TryBackoffMS: []int64{}, AttemptBackoffMS: []int64{}}
	if st.ItemRetries {
		r.TriesPerAttempt = s.RetryAttempts
	}
	if st.RateLimit != "" {
		rps, ok := s.RateLimits[st.RateLimit]
		if !ok {
			return Retry{}, fmt.Errorf("step %s names rate limit %s, which the settings do not give", st.Name, st.RateLimit)
		}
		r.RateLimit, r.RateLimitPerSecond = st.RateLimit, rps
	}
	// The schedule of one item's calls, from its first, every call failing at once.
	var calls []time.Duration
	var at time.Duration
	for a := range r.Attempts {
		if a > 0 {
			d := attemptBackoff(a)
			r.AttemptBackoffMS = append(r.AttemptBackoffMS, d.Milliseconds())
			at += d
		}
		wait := firstTryBackoff
		for t := range r.TriesPerAttempt {
			if t > 0 {
				if a == 0 {
					r.TryBackoffMS = append(r.TryBackoffMS, wait.Milliseconds())
				}
				at += wait
				wait *= 2
			}
			calls = append(calls, at)
		}
	}
	r.WorstCalls = len(calls)
	r.WorstMS = at.Milliseconds()
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
