package tracing

import (
	"os"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace/noop"
)

// TestMain replaces otel's initial global delegates, which cannot be set
// back once replaced, so that every test can restore what it found.
func TestMain(m *testing.M) {
	otel.SetTracerProvider(noop.NewTracerProvider())
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
	os.Exit(m.Run())
}
