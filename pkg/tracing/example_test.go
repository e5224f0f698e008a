package tracing_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/tracing"
)

// A step handler starts its span from the event it consumes and marks the
// event it publishes as that span's child. Whatever the span ids, both events
// are in the run's trace.
func Example() {
	at := time.Date(2026, 10, 13, 22, 0, 0, 0, time.UTC)
	in, _ := events.New("run-7:extract:1", events.TypeStepReady, "/cairn/fetch", "run-7", at,
		events.StepReady{RunID: "run-7", Step: "extract", Generation: 1})

	ctx, span := tracing.Start(context.Background(), in, "extract", attribute.String("cairn.step", "extract"))
	defer span.End()
	// ... the step's work ...
	out, _ := events.New("run-7:match:1", events.TypeStepReady, "/cairn/extract", "run-7", at,
		events.StepReady{RunID: "run-7", Step: "match", Generation: 1})
	tracing.Inject(ctx, &out)

	fmt.Println(strings.Split(out.TraceParent, "-")[1])
	fmt.Println(tracing.RunSpanContext("run-7").TraceID())
	// Output:
	// 520387f2124200673f8788bd70daff7b
	// 520387f2124200673f8788bd70daff7b
}
