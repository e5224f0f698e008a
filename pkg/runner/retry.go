package runner

import (
	"time"

	"github.com/cairnhq/cairn/pkg/retry"
)

// The runner's two retry policies. `cairn faultmap` draws its schedules from these same
// functions, and the compensator retries its reversals with them.

// ItemPolicy is Attempt.Retry's: tries (Config.RetryAttempts) tries of one item in one
// attempt, waiting 100ms, 200ms, 400ms ... (at most 5s), each ±10%.
func ItemPolicy(tries int) retry.Policy {
	return retry.Policy{First: 100 * time.Millisecond, Factor: 2, Max: 5 * time.Second, Jitter: 0.1, Tries: tries}
}

// AttemptPolicy is the NakWithDelay of an attempt that failed temporarily: Delay(n) when
// the step has failed n attempts, 1s, 2s, 4s ... at most 30s, each ±10%. The loop guard, not
// the policy, bounds the attempts.
func AttemptPolicy() retry.Policy {
	return retry.Policy{First: time.Second, Factor: 2, Max: 30 * time.Second, Jitter: 0.1}
}
