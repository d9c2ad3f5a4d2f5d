// Package telemetry installs the OpenTelemetry tracer provider of the
// manager and the MCP gateway from the standard OTEL_* environment
// variables (https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/).
package telemetry

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Tracing is the installed provider; Shutdown flushes the spans not yet
// exported and stops it.
type Tracing struct {
	provider *sdktrace.TracerProvider
}

// Enabled reports whether spans are exported.
func (t *Tracing) Enabled() bool { return t.provider != nil }

// Shutdown exports what is left and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t.provider == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// Flush exports the spans left when the program ends, for up to five
// seconds, and stops the exporter; a failure is logged.
func Flush(t *Tracing, log logr.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		log.Error(err, "Cannot export the last spans")
	}
}

// ForceFlush exports every span ended so far.
func (t *Tracing) ForceFlush(ctx context.Context) error {
	if t.provider == nil {
		return nil
	}
	return t.provider.ForceFlush(ctx)
}

// Setup installs, as the global tracer provider, one that exports spans
// over OTLP when the environment names an endpoint
// (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT),
// unless OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none. Tracing is
// off otherwise: no span is recorded, and a traceparent received still
// goes on downstream. The exporter reads the rest of its settings (headers,
// timeout, certificates, compression) from the same variables; the
// protocol is OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or
// OTEL_EXPORTER_OTLP_PROTOCOL, http/protobuf (the default) or grpc; the
// sampler OTEL_TRACES_SAMPLER; the resource OTEL_SERVICE_NAME (service by
// default) and OTEL_RESOURCE_ATTRIBUTES. The W3C trace context becomes the
// global propagator either way.
func Setup(ctx context.Context, service string) (*Tracing, error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	if on, err := configured(); err != nil || !on {
		return &Tracing{}, err
	}
	exporter, err := newExporter(ctx)
	if err != nil {
		return nil, err
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost())
	if err != nil {
		return nil, fmt.Errorf("tracing: cannot describe the resource: %w", err)
	}
	provider := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	otel.SetTracerProvider(provider)
	return &Tracing{provider: provider}, nil
}

func configured() (bool, error) {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	switch exporter := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")); exporter {
	case "", "otlp":
	case "none":
		return false, nil
	default:
		return false, fmt.Errorf("tracing: OTEL_TRACES_EXPORTER %q is not offered: use otlp or none", exporter)
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "", nil
}

func newExporter(ctx context.Context) (*otlptrace.Exporter, error) {
	protocol := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch strings.TrimSpace(protocol) {
	case "", "http/protobuf":
		return otlptracehttp.New(ctx)
	case "grpc":
		return otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("tracing: OTLP protocol %q is not supported: use http/protobuf or grpc", protocol)
	}
}
