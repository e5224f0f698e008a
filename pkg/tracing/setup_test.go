package tracing

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// cleanEnv unsets every OTEL_* variable for the test, restoring them after:
// t.Setenv records the old value, then the variable is really unset.
func cleanEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "OTEL_") {
			t.Setenv(k, "")
			if err := os.Unsetenv(k); err != nil {
				t.Fatalf("unsetting %s: %v", k, err)
			}
		}
	}
}

// keepGlobals restores otel's provider and propagator when the test ends and
// returns the provider found.
func keepGlobals(t *testing.T) trace.TracerProvider {
	t.Helper()
	tp, prop := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	t.Cleanup(func() {
		otel.SetTracerProvider(tp)
		otel.SetTextMapPropagator(prop)
	})
	return tp
}

func TestSetupOff(t *testing.T) {
	cases := map[string]map[string]string{
		"nothing set":   {},
		"empty values":  {envExporter: "", envEndpoint: "", envTracesEndpoint: " "},
		"sdk disabled":  {envSDKDisabled: "true", envExporter: "otlp", envEndpoint: "http://127.0.0.1:1"},
		"exporter none": {envExporter: "none", envEndpoint: "http://127.0.0.1:1"},
	}
	for name, vars := range cases {
		t.Run(name, func(t *testing.T) {
			cleanEnv(t)
			for k, v := range vars {
				t.Setenv(k, v)
			}
			before := keepGlobals(t)
			shutdown, err := Setup(context.Background(), "test")
			if err != nil {
				t.Fatalf("Setup: %v", err)
			}
			if tp := otel.GetTracerProvider(); tp != before {
				t.Errorf("Setup installed %T, want nothing", tp)
			}
			if shutdown == nil {
				t.Fatal("shutdown is nil")
			}
			if err := shutdown(context.Background()); err != nil {
				t.Errorf("shutdown: %v", err)
			}
		})
	}
}

func TestSetupErrors(t *testing.T) {
	cases := []struct {
		name string
		vars map[string]string
		want string // the variable the error must name
	}{
		{"unknown exporter", map[string]string{envExporter: "bogus"}, envExporter},
		{"grpc", map[string]string{envExporter: "otlp", envProtocol: "grpc"}, envProtocol},
		{"grpc by endpoint", map[string]string{envEndpoint: "http://127.0.0.1:1", envProtocol: "grpc"}, envProtocol},
		{"traces protocol", map[string]string{envExporter: "otlp", envProtocol: "http/protobuf", envTracesProtocol: "http/json"}, envTracesProtocol},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cleanEnv(t)
			for k, v := range tc.vars {
				t.Setenv(k, v)
			}
			before := keepGlobals(t)
			shutdown, err := Setup(context.Background(), "test")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Setup error = %v, want one naming %s", err, tc.want)
			}
			if tc.want != envExporter && !strings.Contains(err.Error(), "http/protobuf") {
				t.Errorf("Setup error = %v, want it to say http/protobuf is supported", err)
			}
			if tp := otel.GetTracerProvider(); tp != before {
				t.Errorf("Setup installed %T after an error", tp)
			}
			if shutdown == nil || shutdown(context.Background()) != nil {
				t.Errorf("shutdown after an error is not a harmless no-op")
			}
		})
	}
}

// A span reaches a real OTLP/HTTP server when the exporter is chosen by name
// or by endpoint alone.
func TestSetupOTLP(t *testing.T) {
	type export struct {
		path, contentType string
		req               *coltracepb.ExportTraceServiceRequest
		err               error
	}
	got := make(chan export, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		req := new(coltracepb.ExportTraceServiceRequest)
		if err == nil {
			err = proto.Unmarshal(body, req)
		}
		if r.Method == http.MethodPost {
			select {
			case got <- export{r.URL.Path, r.Header.Get("Content-Type"), req, err}:
			default: // more exports than expected; the checks below fail
			}
		}
		resp, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(resp)
	}))
	t.Cleanup(srv.Close)

	cases := []struct {
		name    string
		vars    map[string]string
		service string
	}{
		{"by name", map[string]string{envExporter: "otlp", envEndpoint: srv.URL}, "cairn-fetch"},
		{"by endpoint", map[string]string{envEndpoint: srv.URL, envServiceName: "invoices"}, "invoices"},
		{"traces endpoint", map[string]string{envTracesEndpoint: srv.URL + "/v1/traces", envProtocol: "grpc", envTracesProtocol: "http/protobuf"}, "cairn-fetch"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cleanEnv(t)
			for k, v := range tc.vars {
				t.Setenv(k, v)
			}
			keepGlobals(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			shutdown, err := Setup(ctx, "fetch")
			if err != nil {
				t.Fatalf("Setup: %v", err)
			}
			if !slices.Contains(otel.GetTextMapPropagator().Fields(), "traceparent") {
				t.Errorf("propagator fields = %v, want traceparent", otel.GetTextMapPropagator().Fields())
			}
			_, span := StartRun(ctx, "run-2026-10-13-ldh", tc.name)
			span.End()
			if err := shutdown(ctx); err != nil {
				t.Fatalf("shutdown: %v", err)
			}

			var ex export
			select {
			case ex = <-got:
			case <-ctx.Done():
				t.Fatal("no export reached the server")
			}
			if ex.err != nil {
				t.Fatalf("reading the export: %v", ex.err)
			}
			if ex.path != "/v1/traces" || ex.contentType != "application/x-protobuf" {
				t.Errorf("POST %s (%s), want /v1/traces (application/x-protobuf)", ex.path, ex.contentType)
			}
			checkExport(t, ex.req, tc.service, tc.name)
		})
	}
}

// checkExport finds the one span in req and checks its name, its run's trace
// and the resource's service.name.
func checkExport(t *testing.T, req *coltracepb.ExportTraceServiceRequest, service, span string) {
	t.Helper()
	var names []string
	for _, rs := range req.GetResourceSpans() {
		var svc string
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				svc = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			if name := ss.GetScope().GetName(); name != TracerName {
				t.Errorf("scope = %q, want %q", name, TracerName)
			}
			for _, s := range ss.GetSpans() {
				names = append(names, s.GetName())
				if svc != service {
					t.Errorf("service.name = %q, want %q", svc, service)
				}
				want := RunSpanContext("run-2026-10-13-ldh").TraceID()
				if !bytes.Equal(s.GetTraceId(), want[:]) {
					t.Errorf("trace id = %x, want the run's %s", s.GetTraceId(), want)
				}
			}
		}
	}
	if !slices.Equal(names, []string{span}) {
		t.Errorf("exported spans = %q, want [%q]", names, span)
	}
}

// The console exporter writes JSON spans to the writer it is given (stderr
// in Setup).
func TestConsole(t *testing.T) {
	cleanEnv(t)
	t.Setenv(envExporter, "console")
	var out bytes.Buffer
	ctx := context.Background()
	tp, err := newProvider(ctx, "report", &out)
	if err != nil || tp == nil {
		t.Fatalf("newProvider = %v, %v; want a provider", tp, err)
	}
	_, span := tp.Tracer(TracerName).Start(ctx, "report")
	span.End()
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	var s struct {
		Name     string
		Resource []struct {
			Key   string
			Value struct{ Value any }
		}
	}
	if err := json.NewDecoder(&out).Decode(&s); err != nil {
		t.Fatalf("decoding the console output %q: %v", out.String(), err)
	}
	if s.Name != "report" {
		t.Errorf("span name = %q, want report", s.Name)
	}
	var svc any
	for _, kv := range s.Resource {
		if kv.Key == "service.name" {
			svc = kv.Value.Value
		}
	}
	if svc != "cairn-report" {
		t.Errorf("service.name = %v, want cairn-report", svc)
	}
}
