package tracing

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The standard variables Setup reads itself; the exporter, the batch span
// processor, the sampler and the resource read the rest of OTEL_*.
const (
	envSDKDisabled    = "OTEL_SDK_DISABLED"
	envExporter       = "OTEL_TRACES_EXPORTER"
	envEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envServiceName    = "OTEL_SERVICE_NAME"
)

const protocolHTTPProtobuf = "http/protobuf"

// Setup installs a global TracerProvider and the W3C TraceContext propagator
// from the standard OTEL_* variables; an empty variable counts as unset.
//
// Tracing is off by default: when OTEL_SDK_DISABLED=true,
// OTEL_TRACES_EXPORTER=none, or none of OTEL_TRACES_EXPORTER,
// OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set,
// Setup installs nothing and returns a shutdown that does nothing.
//
// OTEL_TRACES_EXPORTER selects the exporter: "otlp" is OTLP over HTTP,
// configured by OTEL_EXPORTER_OTLP_* (only the http/protobuf protocol is
// supported); "console" writes spans as JSON to stderr, since stdout is kept
// for the "ready" line; unset with an endpoint set means "otlp". Spans are
// exported in batches. The resource's service.name is OTEL_SERVICE_NAME, or
// else "cairn-"+service, plus OTEL_RESOURCE_ATTRIBUTES.
//
// The returned shutdown flushes the spans still buffered and stops the
// exporter; it is never nil, even with an error, so it can be deferred.
func Setup(ctx context.Context, service string) (shutdown func(context.Context) error, err error) {
	tp, err := newProvider(ctx, service, os.Stderr)
	if err != nil || tp == nil {
		return noShutdown, err
	}
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return tp.Shutdown, nil
}

func noShutdown(context.Context) error { return nil }

// newProvider builds the provider Setup installs, writing console spans to
// console; nil means tracing is off.
func newProvider(ctx context.Context, service string, console io.Writer) (*sdktrace.TracerProvider, error) {
	if strings.EqualFold(env(envSDKDisabled), "true") {
		return nil, nil
	}
	kind := env(envExporter)
	if kind == "" && (env(envEndpoint) != "" || env(envTracesEndpoint) != "") {
		kind = "otlp"
	}
	var exp sdktrace.SpanExporter
	var err error
	switch kind {
	case "", "none":
		return nil, nil
	case "otlp":
		// The traces variable takes precedence, as in the exporter itself.
		name, proto := envTracesProtocol, env(envTracesProtocol)
		if proto == "" {
			name, proto = envProtocol, env(envProtocol)
		}
		if proto != "" && proto != protocolHTTPProtobuf {
			return nil, fmt.Errorf("%s=%q: only %s is supported", name, proto, protocolHTTPProtobuf)
		}
		if exp, err = otlptracehttp.New(ctx); err != nil {
			return nil, fmt.Errorf("creating the OTLP exporter: %w", err)
		}
	case "console":
		if exp, err = stdouttrace.New(stdouttrace.WithWriter(console)); err != nil {
			return nil, fmt.Errorf("creating the console exporter: %w", err)
		}
	default:
		return nil, fmt.Errorf("%s=%q: the exporter must be otlp, console or none", envExporter, kind)
	}

	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", "cairn-"+service)),
		// Later detectors win: OTEL_SERVICE_NAME replaces the default name.
		resource.WithFromEnv(),
	)
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("reading the resource from %s and OTEL_RESOURCE_ATTRIBUTES: %w", envServiceName, err)
	}
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
	), nil
}

// env is os.Getenv without surrounding white space: an empty variable counts
// as unset.
func env(key string) string { return strings.TrimSpace(os.Getenv(key)) }
