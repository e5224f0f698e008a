package tracing

import (
	"context"
	"crypto/sha256"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/cairnhq/cairn/pkg/events"
)

// TracerName is the instrumentation scope of Cairn's spans.
const TracerName = "github.com/cairnhq/cairn"

// RunIDKey is the span attribute holding the run id.
const RunIDKey = attribute.Key("cairn.run_id")

// traceParentKey is the W3C header name that [propagation.TraceContext] reads
// and writes.
const traceParentKey = "traceparent"

// RunSpanContext is the root of a run's trace: TraceID is the first 16 bytes
// of sha256("cairn-run:"+runID), SpanID the next 8, sampled and remote. The
// root is never recorded; it only gives every span of the run the same trace.
// An empty runID has no trace and gives the zero (invalid) SpanContext.
func RunSpanContext(runID string) trace.SpanContext {
	if runID == "" {
		return trace.SpanContext{}
	}
	sum := sha256.Sum256([]byte("cairn-run:" + runID))
	var tid trace.TraceID
	var sid trace.SpanID
	copy(tid[:], sum[:16])
	copy(sid[:], sum[16:24])
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    tid,
		SpanID:     sid,
		TraceFlags: trace.FlagsSampled,
		Remote:     true,
	})
}

// Inject writes ctx's span context into e.TraceParent in W3C form
// ("00-<32 hex>-<16 hex>-<2 hex>"). When ctx holds no valid span context it
// writes the root of the run named by e.Subject; when the subject is empty
// too, e.TraceParent is left as it is.
func Inject(ctx context.Context, e *events.Event) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		sc = RunSpanContext(e.Subject)
		if !sc.IsValid() {
			return
		}
	}
	// The extension carries traceparent only, so the W3C propagator is used
	// directly rather than the global one, which may be a no-op or also
	// write baggage the event cannot carry.
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), eventCarrier{e})
}

// Start starts a consumer span named name for handling e, with the attribute
// cairn.run_id = e.Subject followed by attrs. Its parent is the span context
// in e.TraceParent when that is valid and in the run's trace; otherwise the
// run's root ([RunSpanContext]), and a valid traceparent of another trace
// becomes a link instead of the parent. A span already in ctx is never the
// parent of a run's span. An event without a subject (a start command
// without a run id) has no run trace: its parent is its traceparent when
// valid, or else whatever ctx holds.
func Start(ctx context.Context, e events.Event, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
	parent := extract(e.TraceParent)
	if root := RunSpanContext(e.Subject); root.IsValid() && parent.TraceID() != root.TraceID() {
		if parent.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: parent}))
		}
		parent = root
	}
	if parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	}
	opts = append(opts, trace.WithAttributes(runAttrs(e.Subject, attrs)...))
	return otel.Tracer(TracerName).Start(ctx, name, opts...)
}

// StartRun starts an internal span named name in the trace of runID, as a
// child of the run's root, for work not triggered by an event (the
// supervisor's sweep republishing a step). Its attributes are cairn.run_id =
// runID followed by attrs. An empty runID starts an ordinary span from ctx.
func StartRun(ctx context.Context, runID, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if root := RunSpanContext(runID); root.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, root)
	}
	return otel.Tracer(TracerName).Start(ctx, name,
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(runAttrs(runID, attrs)...))
}

// extract parses a traceparent; anything invalid gives the zero SpanContext.
// It extracts into an empty context so that a span already in the caller's
// context is never mistaken for the event's.
func extract(traceParent string) trace.SpanContext {
	if traceParent == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{traceParentKey: traceParent})
	return trace.SpanContextFromContext(ctx)
}

// runAttrs puts cairn.run_id before attrs, in a new slice so the caller's
// is not written to.
func runAttrs(runID string, attrs []attribute.KeyValue) []attribute.KeyValue {
	if runID == "" {
		return attrs
	}
	return append([]attribute.KeyValue{RunIDKey.String(runID)}, attrs...)
}

// eventCarrier lets a propagator write an event's traceparent extension.
// Other keys (tracestate) have no place in the event and are dropped.
type eventCarrier struct{ e *events.Event }

func (c eventCarrier) Get(key string) string {
	if key == traceParentKey {
		return c.e.TraceParent
	}
	return ""
}

func (c eventCarrier) Set(key, value string) {
	if key == traceParentKey {
		c.e.TraceParent = value
	}
}

func (c eventCarrier) Keys() []string { return []string{traceParentKey} }
