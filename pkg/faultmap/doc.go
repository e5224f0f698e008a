// Package faultmap reads a pipeline definition and says, step by step, how it survives
// faults: its kind, what it checkpoints, how its outside writes are made safe to repeat,
// how an undo answers them, its retry policy and that policy's worst case, and whether it
// waits for a person. Then it lists the gaps. `cairn faultmap` prints the map.
//
// # Worst case of a retry policy
//
// The numbers follow the runner (package runner) under [Settings], computed from its own
// retry policies ([Policies]: runner.ItemPolicy and runner.AttemptPolicy, package retry):
//
//   - A step with [pipeline.Step.ItemRetries] tries each item's outside call up to
//     RetryAttempts times in one attempt, waiting 100ms, 200ms, 400ms ... between tries
//     (Attempt.Retry). Any other step calls once per attempt.
//   - An attempt that fails temporarily comes back with NakWithDelay after 1s<<n (n = the
//     failed attempts so far, capped at 30s); the failure that reaches LoopGuard hands the
//     run over.
//   - Every wait is drawn within ±10% of its base (never past its cap): the map gives each
//     wait's bounds, the worst time at the longest waits and the peak at the shortest. Every attempt is a delivery, and the runner parks a step event at its
//     MaxDeliver-th delivery, so min(LoopGuard, MaxDeliver-1) attempts run.
//
// So one item is called at most tries × attempts times while every call fails at once (as
// a 429 does), over at most the sum of the longest waits. A crash is not a failure the loop guard counts:
// crashes and redeliveries are bounded only by MaxDeliver, so one step event calls one item
// at most tries × (MaxDeliver-1) times. A reassignment by the supervisor publishes a new
// step event; those are bounded by CAIRN_REASSIGN_LIMIT and not counted here.
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
//   - [NoCompensation]: outside writes that no undo answers;
//   - [SnapshotNotSaved]: a snapshot read that checkpoints nothing;
//   - [UnknownApprovalStep]: an approval setting naming no step of the pipeline.
package faultmap
