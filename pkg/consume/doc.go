// Package consume runs the consume loop every long-running Cairn worker has: the step
// runner, the compensator, the supervisor and the outbox sender each consume one durable
// through [Run].
//
// # The one shape
//
// [Run] hands every message of a durable consumer to a handler until its context ends,
// then stops the consumer (or drains it, letting the messages already buffered reach the
// handler) and waits, within a bound, until it has closed. It returns nil on that clean
// stop.
//
// A loop that ends for any other reason is an error, never an idle goroutine: the
// consumer was deleted under it (the server answers its pull with 409 Consumer Deleted),
// the server no longer knows it (its pulls meet no responders, its heartbeats stop and
// the consumer's info says not found), the connection closed, or the server refused the
// pull. Run then returns an error wrapping [ErrEnded] and the cause (for example
// jetstream.ErrConsumerDeleted or jetstream.ErrConsumerNotFound), naming the consumer and
// its stream. A missed heartbeat alone is not an end: nats.go pulls again by itself, and
// Run asks the server whether the consumer still exists before it gives up on it. So a
// deletion is noticed at once while a pull waits or when the next one is made, and within
// two pull heartbeats (30s with the default pull expiry) when it races a pull that the
// dying consumer takes and never answers. While the handler is busy no pull waits, so a
// handler that takes messages one at a time notices after the message in hand.
//
// The process decides what an end means; Cairn's services turn unready (/readyz answers
// 503 naming the loop) and exit non-zero, so that systemd, Kubernetes or compose restarts
// them. [Ended] tells the caller at once, before the stop, for a worker whose stop takes a
// while (the runner gives the step in hand its grace).
package consume
