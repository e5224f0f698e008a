// Package ratelimit keeps a declared limit of an outside system (a model's calls per
// second) for every instance at once: the limit's state lives under one key of a JetStream
// KV bucket, and each call books its slot there with a compare-and-set.
//
//	lim, err := ratelimit.New(ctx, ratelimit.Config{JS: js,
//		Limit: ratelimit.Limit{Bucket: "cairn-limits", Key: "model", PerSecond: 5, Burst: 1}})
//	...
//	if _, err := lim.Wait(ctx); err != nil { // returns at the call's slot
//		return err
//	}
//	callCtx, cancel := context.WithTimeout(ctx, callTimeout) // the call's own time starts now
//
// # The model
//
// The key holds the last booking (generic cell rate algorithm; or a hold, see Holds):
// until when the earlier calls keep the limit busy (booked_until), and the interval and
// burst it was made under.
// A caller reads the key, writes the next booking with Update on the revision it read (a
// lost compare-and-set means another instance booked first: read again), then reads its own
// entry back. The slot follows from the entry alone: the call joins the queue at
// max(booked_until, written), books one interval, and may go up to burst-1 intervals ahead
// of the queue's end, never before written. written is the entry's timestamp, set by the
// NATS server (the stream leader) when it stored the write, so every reader computes the
// same slot, and consecutive slots are at least one interval apart after the burst: in any
// window of length d the limit grants at most burst + d/interval calls ([Limit.MostIn]).
//
// # Holds
//
// [Limiter.Hold] passes on a server's Retry-After to every instance: it writes, with the
// same compare-and-set as a booking, an entry that grants no call and holds the limit for
// d (more than 0, at most [MaxHold], else [ErrHold]). Its end is the entry's timestamp
// plus d, on the same server clock as the slots, so it never ends before the server's own
// wait (the write follows the answer that asked for it). Every later entry carries the
// end (hold_until) while it is ahead, and no slot is granted before it. The hold also
// books the limit up to its end (booked_until), so the calls after it keep their
// intervals from there: the burst at the end at most, then one an interval, and the
// bound of [Limit.MostIn] still holds, as for slots booked and left unused. Both are
// maxima: a hold never shortens a booking or a longer hold already written. Slots booked
// before the hold keep their time; their calls may still meet the server's refusal and
// hold again. Every instance must run a version that knows holds: an older one reads a
// hold as a booking and drops its end.
//
// # Clocks
//
// No instance's wall clock is used. The slots are in the server's time; an instance waits
// for its slot as a duration (slot − written) from the moment the write's ack reached it,
// on its monotonic clock. The write was stored before its ack arrived, so the wait never
// ends early, only late by up to a round trip. Skew between instances does not matter. A
// step of the server's clock does: a clock set back makes the calls wait up to the step
// longer than needed (safe); a clock set forward, or a new stream leader whose clock runs
// ahead, grants the next call at once, at most one burst early, once.
//
// # Waiting is not the call
//
// [Limiter.Wait] returns at the slot; the caller starts its call's timeout after it. The
// wait is bounded only by the caller's context: a context that ends first leaves the slot
// booked and unused (the limit is never exceeded for it, it just wastes one). Every
// instance should declare the same limit; each booking carries its own interval and
// burst, so readers agree on every slot even while a change of the limit rolls out.
//
// # Failures
//
// A read or write of the bucket that fails (the server unreachable, a timeout) is retried
// with backoff for up to [Config.Unavailable], then Wait returns [ErrUnavailable], a
// temporary error: no call is granted without a booking, never unlimited. A booking written
// whose read-back fails is left unused. A value that is not a booking is [ErrState].
//
// # Cost
//
// Three round trips to the server per call (read, compare-and-set, read back), and one more
// read and write each time another instance booked in between (BenchmarkWait). A hold
// takes two (read, compare-and-set); the bookings pay for holds only while one is ahead,
// a few bytes more in their entries.
package ratelimit
