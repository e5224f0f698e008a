package tracing_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/tracing"
)

const (
	runA = "run-2026-10-13-ldh"
	runB = "run-2026-10-13-man"
	// foreign is a valid traceparent of a trace that is no run's.
	foreign = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
)

// record installs an SDK provider that keeps every span and the W3C
// propagator, restoring the globals when the test ends.
func record(t *testing.T) *tracetest.SpanRecorder {
	t.Helper()
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() {
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
		if err := tp.Shutdown(context.Background()); err != nil {
			t.Errorf("shutting down the test provider: %v", err)
		}
	})
	return rec
}

// stepEvent builds a step.ready event for step of run.
func stepEvent(t *testing.T, run, step string) events.Event {
	t.Helper()
	e, err := events.New(run+":"+step+":1", events.TypeStepReady, "/cairn/test", run,
		time.Date(2026, 10, 13, 22, 0, 0, 0, time.UTC),
		events.StepReady{RunID: run, Step: step, Generation: 1})
	if err != nil {
		t.Fatalf("building the %s event: %v", step, err)
	}
	return e
}

// ended returns the one ended span called name.
func ended(t *testing.T, rec *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d ended spans called %q, want 1", len(found), name)
	}
	return found[0]
}

func attr(s sdktrace.ReadOnlySpan, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func TestRunSpanContext(t *testing.T) {
	a := tracing.RunSpanContext(runA)
	if !a.IsValid() || !a.IsSampled() || !a.IsRemote() {
		t.Fatalf("root of %s = %+v, want valid, sampled and remote", runA, a)
	}
	// sha256("cairn-run:run-2026-10-13-ldh") by sha256sum, pinned: other processes and
	// releases must derive the same trace.
	if got, want := a.TraceID().String(), "dc6b2a17278d166ca2def1d77b95621c"; got != want {
		t.Errorf("trace id = %s, want %s", got, want)
	}
	if got, want := a.SpanID().String(), "fe91f542a766aa8c"; got != want {
		t.Errorf("span id = %s, want %s", got, want)
	}
	if !a.Equal(tracing.RunSpanContext(runA)) {
		t.Errorf("two roots of %s differ", runA)
	}
	if b := tracing.RunSpanContext(runB); b.TraceID() == a.TraceID() {
		t.Errorf("%s and %s share trace %s", runA, runB, a.TraceID())
	}
	if z := tracing.RunSpanContext(""); z.IsValid() {
		t.Errorf("root of the empty run id = %+v, want invalid", z)
	}
}

// A run's steps form one chain in one trace; another run is another trace.
func TestStartChain(t *testing.T) {
	rec := record(t)
	ctx := context.Background()
	root := tracing.RunSpanContext(runA)

	fetch := stepEvent(t, runA, "fetch")
	ctx1, s1 := tracing.Start(ctx, fetch, "fetch", attribute.String("cairn.step", "fetch"))
	extract := stepEvent(t, runA, "extract")
	tracing.Inject(ctx1, &extract)
	s1.End()
	_, s2 := tracing.Start(ctx, extract, "extract")
	s2.End()
	_, s3 := tracing.Start(ctx, stepEvent(t, runB, "fetch"), "other-run")
	s3.End()

	first := ended(t, rec, "fetch")
	if first.SpanContext().TraceID() != root.TraceID() {
		t.Errorf("first span trace = %s, want the run's %s", first.SpanContext().TraceID(), root.TraceID())
	}
	if first.Parent().SpanID() != root.SpanID() || !first.Parent().IsRemote() {
		t.Errorf("first span parent = %s, want the run's remote root %s", first.Parent().SpanID(), root.SpanID())
	}
	if first.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("first span kind = %s, want consumer", first.SpanKind())
	}
	if v, ok := attr(first, tracing.RunIDKey); !ok || v.AsString() != runA {
		t.Errorf("first span %s = %q (present %v), want %q", tracing.RunIDKey, v.AsString(), ok, runA)
	}
	if v, ok := attr(first, "cairn.step"); !ok || v.AsString() != "fetch" {
		t.Errorf("first span cairn.step = %q (present %v), want fetch", v.AsString(), ok)
	}
	if n := len(first.Links()); n != 0 {
		t.Errorf("first span has %d links, want 0", n)
	}

	second := ended(t, rec, "extract")
	if second.SpanContext().TraceID() != root.TraceID() {
		t.Errorf("second span trace = %s, want the run's %s", second.SpanContext().TraceID(), root.TraceID())
	}
	if second.Parent().SpanID() != first.SpanContext().SpanID() {
		t.Errorf("second span parent = %s, want the first span %s", second.Parent().SpanID(), first.SpanContext().SpanID())
	}

	other := ended(t, rec, "other-run")
	if got, want := other.SpanContext().TraceID(), tracing.RunSpanContext(runB).TraceID(); got != want || got == root.TraceID() {
		t.Errorf("other run's trace = %s, want %s, not %s", got, want, root.TraceID())
	}
}

// A caller's own trace is linked, never the parent; an unreadable
// traceparent is ignored.
func TestStartOutsideTraceParent(t *testing.T) {
	rec := record(t)
	root := tracing.RunSpanContext(runA)

	e := stepEvent(t, runA, "fetch")
	e.TraceParent = foreign
	_, s := tracing.Start(context.Background(), e, "foreign")
	s.End()
	got := ended(t, rec, "foreign")
	if got.SpanContext().TraceID() != root.TraceID() || got.Parent().SpanID() != root.SpanID() {
		t.Errorf("span = trace %s parent %s, want the run's root %s/%s",
			got.SpanContext().TraceID(), got.Parent().SpanID(), root.TraceID(), root.SpanID())
	}
	if links := got.Links(); len(links) != 1 {
		t.Errorf("span has %d links, want 1", len(links))
	} else if l := links[0].SpanContext; l.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || l.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("link = %s/%s, want the foreign context", l.TraceID(), l.SpanID())
	}

	for _, bad := range []string{
		"garbage",
		"00-abc-def-01",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01", // zero trace id
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // forbidden version
	} {
		t.Run(bad, func(t *testing.T) {
			rec := record(t)
			e := stepEvent(t, runA, "fetch")
			e.TraceParent = bad
			_, s := tracing.Start(context.Background(), e, "bad")
			s.End()
			got := ended(t, rec, "bad")
			if got.SpanContext().TraceID() != root.TraceID() || got.Parent().SpanID() != root.SpanID() {
				t.Errorf("span = trace %s parent %s, want the run's root", got.SpanContext().TraceID(), got.Parent().SpanID())
			}
			if n := len(got.Links()); n != 0 {
				t.Errorf("span has %d links, want 0", n)
			}
		})
	}
}

// A span already in ctx (the consumer loop's, say) does not become the
// parent of a run's step.
func TestStartIgnoresSpanInContext(t *testing.T) {
	rec := record(t)
	ctx, outer := otel.Tracer("test").Start(context.Background(), "outer")
	_, s := tracing.Start(ctx, stepEvent(t, runA, "fetch"), "inner")
	s.End()
	outer.End()
	got := ended(t, rec, "inner")
	if root := tracing.RunSpanContext(runA); got.Parent().SpanID() != root.SpanID() {
		t.Errorf("parent = %s, want the run's root %s, not the outer span %s",
			got.Parent().SpanID(), root.SpanID(), ended(t, rec, "outer").SpanContext().SpanID())
	}
}

func TestStartRun(t *testing.T) {
	rec := record(t)
	root := tracing.RunSpanContext(runA)
	ctx, s := tracing.StartRun(context.Background(), runA, "sweep", attribute.String("cairn.step", "match"))
	next := stepEvent(t, runA, "match")
	tracing.Inject(ctx, &next)
	s.End()
	_, c := tracing.Start(context.Background(), next, "match")
	c.End()

	sweep := ended(t, rec, "sweep")
	if sweep.SpanContext().TraceID() != root.TraceID() || sweep.Parent().SpanID() != root.SpanID() {
		t.Errorf("sweep = trace %s parent %s, want the run's root", sweep.SpanContext().TraceID(), sweep.Parent().SpanID())
	}
	if sweep.SpanKind() != trace.SpanKindInternal {
		t.Errorf("sweep kind = %s, want internal", sweep.SpanKind())
	}
	if v, ok := attr(sweep, tracing.RunIDKey); !ok || v.AsString() != runA {
		t.Errorf("sweep %s = %q (present %v), want %q", tracing.RunIDKey, v.AsString(), ok, runA)
	}
	if got := ended(t, rec, "match"); got.Parent().SpanID() != sweep.SpanContext().SpanID() {
		t.Errorf("republished step's parent = %s, want the sweep %s", got.Parent().SpanID(), sweep.SpanContext().SpanID())
	}
}

func TestInject(t *testing.T) {
	rec := record(t)

	e := stepEvent(t, runA, "fetch")
	tracing.Inject(context.Background(), &e)
	root := tracing.RunSpanContext(runA)
	if want := "00-" + root.TraceID().String() + "-" + root.SpanID().String() + "-01"; e.TraceParent != want {
		t.Errorf("without a span, traceparent = %q, want the run's root %q", e.TraceParent, want)
	}

	ctx, s := tracing.Start(context.Background(), e, "fetch")
	tracing.Inject(ctx, &e)
	s.End()
	sc := ended(t, rec, "fetch").SpanContext()
	if want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"; e.TraceParent != want {
		t.Errorf("with a span, traceparent = %q, want %q", e.TraceParent, want)
	}

	start := events.Event{ID: "req-1", Type: events.TypeRunStart, Source: "/cairn/test"}
	tracing.Inject(context.Background(), &start)
	if start.TraceParent != "" {
		t.Errorf("without a span or run, traceparent = %q, want none", start.TraceParent)
	}
}

// The trace context survives the real codec: the span started from the
// decoded event is the child of the span that published it.
func TestCodecRoundTrip(t *testing.T) {
	rec := record(t)
	ctx, s := tracing.Start(context.Background(), stepEvent(t, runA, "fetch"), "fetch")
	next := stepEvent(t, runA, "extract")
	tracing.Inject(ctx, &next)
	s.End()

	m, err := events.Encode(events.StepSubject("extract", runA), next)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	got, err := events.Decode(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data})
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if got.TraceParent != next.TraceParent {
		t.Fatalf("decoded traceparent = %q, want %q", got.TraceParent, next.TraceParent)
	}
	_, c := tracing.Start(context.Background(), got, "extract")
	c.End()

	parent := ended(t, rec, "fetch").SpanContext()
	child := ended(t, rec, "extract")
	if child.SpanContext().TraceID() != parent.TraceID() || child.Parent().SpanID() != parent.SpanID() {
		t.Errorf("child = trace %s parent %s, want %s/%s",
			child.SpanContext().TraceID(), child.Parent().SpanID(), parent.TraceID(), parent.SpanID())
	}
}

// Without Setup the global provider records nothing, yet the trace context
// still travels from event to event.
func TestWithoutProvider(t *testing.T) {
	e := stepEvent(t, runA, "fetch")
	e.TraceParent = "00-" + tracing.RunSpanContext(runA).TraceID().String() + "-00f067aa0ba902b7-01"
	ctx, s := tracing.Start(context.Background(), e, "fetch")
	defer s.End()
	if s.IsRecording() {
		t.Fatalf("span records without a provider")
	}
	next := stepEvent(t, runA, "extract")
	tracing.Inject(ctx, &next)
	if next.TraceParent != e.TraceParent {
		t.Errorf("traceparent = %q, want the incoming %q", next.TraceParent, e.TraceParent)
	}
}
