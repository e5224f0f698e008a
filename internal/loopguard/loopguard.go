// Package loopguard is the one home of the loop guard's counting: when a step's attempts
// stop making progress, the run is handed over instead of looping. The runner counts and
// judges (a step with a progress counter by what it made durable, one without by its failed
// attempts); the fault map explains the same rule from it.
//
// The count lives in the run's record (kvcheckpoint.Progress): the step it counts, what the
// step had made durable at the last count, and how many attempts in a row made no more.
package loopguard

import kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"

// Next is the loop guard's count after an attempt of step ended with count made durable:
// no_progress goes back to 0 when the count grew since the last count of the same step
// (the first count compares with nothing made), else one more. The run is handed over when
// no_progress reaches the guard (runner.Config.LoopGuard).
func Next(prev *kc.Progress, step string, count int) kc.Progress {
	if prev == nil || prev.Step != step {
		prev = &kc.Progress{Step: step}
	}
	if count > prev.Count {
		return kc.Progress{Step: step, Count: count}
	}
	return kc.Progress{Step: step, Count: prev.Count, NoProgress: prev.NoProgress + 1}
}

// Attempts is how many attempts of a step the loop guard lets run while one item fails
// every time, before the run is handed over (the delivery limit may end them sooner): with
// a counter, the first attempt made the items before it (progress), then guard attempts
// make none; without, guard failed attempts.
func Attempts(guard int, counted bool) int {
	if !counted {
		return guard
	}
	var p *kc.Progress
	for n := 1; ; n++ {
		np := Next(p, "s", 1) // the same count after every attempt
		if np.NoProgress >= guard {
			return n
		}
		p = &np
	}
}
