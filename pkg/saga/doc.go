// Package saga records every outside effect of a run on CAIRN_SAGA, so that it can be
// reversed later (DESIGN.md, "Compensation (the saga)").
//
// A writing step records the intent before it makes an effect and the outcome after, so no
// effect exists without its record: an intent without an outcome is an effect that may or
// may not have happened, and the compensator looks it up in the outside system. Each record
// says how to reverse its effect: the reversal is itself a keyed, fenced write (a row
// "<key>:rev" that negates the row written, a note "<key>:withdraw" that withdraws a message
// sent), so applying it twice is harmless.
//
// A record is one event, at most events.MaxSize: it carries what the reversal needs and a
// digest of anything bulky (a message's body is on the outbox), never the bulk itself, so
// that it fits whatever the size of the effect.
package saga
