// Package audit records the timeline of runs on CAIRN_AUDIT and every refused input on
// cairn.rejected. An attempt's events are published asynchronously in a Batch and awaited
// before the step's message is acknowledged, so the timeline costs no round trip on the hot
// path; Post publishes a bookkeeping event whose ack the caller need not wait for at all.
package audit
