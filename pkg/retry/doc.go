// Package retry says which errors are worth another try and how long to wait before it.
//
// # What is worth another try
//
// [ErrTemporary] marks an error that the same call may not meet again: a timeout, a busy
// server, a dropped connection, a serialization failure. A layer that knows its own
// errors (a database store knows its driver's codes: package sqlidem) marks them with
// [Temporary]; callers ask errors.Is(err, ErrTemporary). It is the only such mark: a
// package whose temporary error means something more (an injected fault, an HTTP write
// whose key is in flight) declares it as Temporary(errors.New("...")), which reads as its
// own message and still is ErrTemporary. The step runner (package runner) treats the mark
// as its temporary class.
//
// # How long to wait
//
// A [Policy] is one schedule of waits: the first wait, a factor from one wait to the next,
// a cap, and a jitter that spreads each wait evenly within ±Jitter of its base, so that
// many callers that failed together do not come back together. Delay(n) is the n-th wait
// (from 0); Bounds(n) is the range it is drawn from, which is what a person reading the
// schedule (`cairn faultmap`) needs. The jitter source is injectable (Policy.Rand), so tests
// can fix it.
//
// The smallest complete use:
//
//	p := retry.Policy{First: 100 * time.Millisecond, Factor: 2, Max: 5 * time.Second, Jitter: 0.1, Tries: 3}
//	err := p.Do(ctx, retry.IsTemporary, func(try int) error { return call(ctx) })
package retry
