// Package faultmap reads a pipeline definition and says, step by step, how it survives
// faults: its kind, what it checkpoints, how its outside writes are made safe to repeat,
// how an undo answers them, its retry policy and that policy's worst case, and whether it
// waits for a person. Then it lists the gaps. `cairn faultmap` prints the map.
//
// # Worst case of a retry policy
//
// The numbers follow the runner (package runner) under [Settings], computed from its own
// retry policies ([Policies]: the item and attempt policies of internal/retrypolicy):
//
//   - A step with [pipeline.Step.ItemRetries] tries each item's outside call up to
//     RetryAttempts times in one attempt, waiting 100ms, 200ms, 400ms ... between tries
//     (Attempt.Retry). Any other step calls once per attempt.
//   - An attempt that fails temporarily comes back with NakWithDelay after 1s<<n (n = the
//     failed attempts so far, capped at 30s). Every attempt is a delivery, and the runner
//     hands the run over at a step event's MaxDeliver-th delivery.
//   - Every wait is drawn within ±10% of its base (never past its cap): the map gives each
//     wait's bounds, the worst time at the longest waits and the peak at the shortest.
//   - The loop guard of a step without a progress counter hands the run over at the
//     LoopGuard-th failed attempt (a crash counts when the step restarts): LoopGuard
//     attempts. A step in [Settings.ProgressSteps] counts what it made durable after each
//     failed or dead attempt and is handed over after LoopGuard
//     attempts in a row without more: an item that fails every time was preceded by items
//     made (progress), so the guard gives LoopGuard+1 attempts. Either way at
//     most MaxDeliver-1 attempts run on one step event.
//
// So one item is called at most tries × attempts times while every call fails at once (as
// a 429 does), over at most the sum of the longest waits. Crashes and redeliveries of one
// step event are bounded by MaxDeliver, so it calls one item at most tries × (MaxDeliver-1)
// times. A reassignment publishes a new step event; the supervisor hands the run over at
// CAIRN_REASSIGN_LIMIT reassignments since the step last progressed (not counted here).
//
// The peak rate is the most calls of one item that fall within any one second of that
// schedule (two calls share a second when they are less than a second apart). A step that
// names a [pipeline.Step.RateLimit] has a gap when the peak exceeds the declared calls per
// second.
//
// # Gaps
//
// Each [Gap] names its step (or, for an approval setting, the name it gives) and says in a
// sentence what can go wrong:
//
//   - [NoKey]: outside writes without a key (a model call is judged by its memo instead);
//   - [IrreversibleFirst]: an irreversible step before a step whose writes can be reversed;
//   - [NoMemo]: a model call whose answers are not memoised;
//   - [OverRateLimit]: a retry policy whose peak exceeds the declared rate limit;
//   - [UnfencedWrite]: a business write without a fence;
//   - [NoCompensation]: outside writes that no undo answers (an irreversible step's effects are answered, not undone: it has none to miss);
//   - [SnapshotNotSaved]: a snapshot read that checkpoints nothing;
//   - [UnknownApprovalStep]: an approval setting naming no step of the pipeline.
package faultmap
