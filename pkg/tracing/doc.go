// Package tracing makes one run one trace: OpenTelemetry spans for every step
// of a run, across services, restarts and republished events, land in the
// same trace.
//
// # One trace per run
//
// The trace id of a run is not random: it is the first 16 bytes of
// sha256("cairn-run:"+runID), and the next 8 bytes are the span id of a root
// that is never recorded ([RunSpanContext]). Any process that knows the run
// id can therefore place a span in the run's trace without having seen the
// event that started it. This matters because context is lost on the way:
// the supervisor republishes a step after a crash without the old message, a
// service restarts mid-run, and a run may be started by a bare `nats pub`
// that carries someone else's trace or none at all.
//
// # Parents and links
//
// A step event carries the W3C trace context of the span that published it
// in the CloudEvents distributed-tracing extension (the ce-traceparent
// header, [events.Event.TraceParent]); [Inject] writes it and [Start] reads
// it, so a step's span is the child of the span of the step before it. When
// the traceparent is missing, invalid or belongs to another trace, the span
// hangs from the run's root instead; a traceparent of another trace (a
// caller's own trace) becomes a span link, so the caller can still follow
// it. Work not triggered by an event, such as the supervisor's sweep,
// uses [StartRun].
//
// Because the root itself is never exported, a trace viewer shows the
// first spans of a run as children of a missing parent. The root is marked
// sampled, so a parent-based sampler keeps every run; to keep a share of the runs,
// each one whole, use OTEL_TRACES_SAMPLER=traceidratio, which decides on the
// trace id and so once per run.
//
// # Setup
//
// [Setup] installs the SDK from the standard OTEL_* variables and is off
// unless an exporter or an OTLP endpoint is named. The other functions use
// the global tracer provider at call time; without Setup they cost little
// and still carry the trace context from event to event.
package tracing
