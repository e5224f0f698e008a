// Package bench measures Cairn (`cairn bench`): durable step transitions through the real
// step runner against the raw JetStream floor measured in the same invocation, the reference
// night end to end, the resume after the entry-24 crash, and many small nights at once.
//
// # What is measured
//
//   - Transitions: K runs of an S-step pipeline of lease-free no-op steps, C runs in flight,
//     each step returning a ~200-byte output that is checkpointed like any other, on an
//     embedded nats-server with file storage. The raw floor is a bare loop doing one KV
//     compare-and-set plus one synchronous publish per transition, on a server with the same
//     settings and at the same concurrency.
//   - Night, resume and many run `cairn dev` as a child process (as the demo and the chaos
//     runs do), so the peak RSS is that of the process that ran the night: its VmHWM, read
//     from /proc before it is stopped.
//
// Figures are wall-clock and depend on the machine; [Machine] names it.
package bench
