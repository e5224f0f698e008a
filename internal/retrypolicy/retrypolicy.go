// Package retrypolicy holds the step runner's two retry policies, the one home of their
// numbers: the runner waits by them, the compensator retries its reversals with them, and
// `cairn faultmap` draws its schedules from them. Each is a retry.Policy, jittered ±10%.
package retrypolicy

import (
	"time"

	"github.com/cairnhq/cairn/pkg/retry"
)

// Item is Attempt.Retry's: tries (runner.Config.RetryAttempts) tries of one item in one
// attempt, waiting 100ms, 200ms, 400ms ... (at most 5s), each ±10%.
func Item(tries int) retry.Policy {
	return retry.Policy{First: 100 * time.Millisecond, Factor: 2, Max: 5 * time.Second, Jitter: 0.1, Tries: tries}
}

// Attempt is the NakWithDelay of an attempt that failed temporarily: Delay(n) when the step
// has failed n attempts, 1s, 2s, 4s ... at most 30s, each ±10%. The loop guard, not the
// policy, bounds the attempts.
func Attempt() retry.Policy {
	return retry.Policy{First: time.Second, Factor: 2, Max: 30 * time.Second, Jitter: 0.1}
}
