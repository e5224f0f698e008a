package runner_test

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/cairnhq/cairn/internal/eventually"
	"github.com/cairnhq/cairn/pkg/tracing"
)

// One run is one trace: every step's span is in the run's trace, and each step's span is the
// child of the span of the step that published its event.
func TestARunIsOneTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev); _ = tp.Shutdown(t.Context()) })

	f := setup(t)
	f.runAll(t, output("one"))
	f.start(t, "r1")
	f.wait(t, "r1", finishing)

	byName := map[string]sdktrace.ReadOnlySpan{}
	eventually.That(t, 20*time.Second, "three spans ended", eventually.True(func() bool {
		for _, s := range rec.Ended() {
			byName[s.Name()] = s
		}
		return len(byName) >= 3
	}))
	want := tracing.RunSpanContext("r1").TraceID()
	parent := tracing.RunSpanContext("r1").SpanID()
	for _, step := range toy.Names() {
		s, ok := byName["step "+step]
		if !ok {
			t.Fatalf("no span for step %s; spans %v", step, byName)
		}
		if s.SpanContext().TraceID() != want {
			t.Errorf("step %s in trace %s, want the run's %s", step, s.SpanContext().TraceID(), want)
		}
		if s.Parent().SpanID() != parent {
			t.Errorf("step %s's parent %s, want %s", step, s.Parent().SpanID(), parent)
		}
		parent = s.SpanContext().SpanID()
	}
}
