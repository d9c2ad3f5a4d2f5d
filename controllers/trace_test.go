package controllers

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/adapter"
	"github.com/toolledger/toolledger/pkg/tracing"
)

// A tenant names the trace an action's calls relate to, any trace: by
// default the call's span starts a trace of its own with a link to the
// caller's context, marked as caller-supplied, and the downstream is sent
// that new trace; a manager that trusts its tenants continues the caller's
// trace instead. Without a tracer provider an untrusted caller's context
// goes nowhere, a trusted one's downstream unchanged.
func TestStartCallSpan(t *testing.T) {
	const (
		caller  = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		spanID  = "00f067aa0ba902b7"
	)
	recorder := tracetest.NewSpanRecorder()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	otel.SetTracerProvider(provider)
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })

	action := &v1alpha1.ToolAction{}
	action.Namespace, action.Name = "shop", "order-1001-charge"
	action.Spec.ToolRef.Name = "charge"
	action.Annotations = map[string]string{v1alpha1.TraceparentAnnotation: caller}

	call := func(trustCaller bool) (sdktrace.ReadOnlySpan, string) {
		t.Helper()
		var req adapter.Request
		_, span := startCallSpan(context.Background(), action, operationAttempt, &req, trustCaller)
		span.End()
		ended := recorder.Ended()
		return ended[len(ended)-1], req.Traceparent
	}

	untrusted, downstream := call(false)
	if got := untrusted.SpanContext().TraceID().String(); got == traceID {
		t.Errorf("by default the span joins the caller's trace %s", got)
	}
	if untrusted.Parent().IsValid() {
		t.Errorf("by default the span has the parent %s", untrusted.Parent().SpanID())
	}
	links := untrusted.Links()
	if len(links) != 1 || links[0].SpanContext.TraceID().String() != traceID || links[0].SpanContext.SpanID().String() != spanID ||
		len(links[0].Attributes) != 1 || links[0].Attributes[0] != tracing.CallerSupplied.Bool(true) {
		t.Errorf("by default the span links to %+v, want the caller's span, marked toolledger.caller_supplied", links)
	}
	if want := tracing.Traceparent(trace.ContextWithSpanContext(context.Background(), untrusted.SpanContext())); downstream != want {
		t.Errorf("by default the downstream is sent %q, want the span's own %q", downstream, want)
	}

	trusted, downstream := call(true)
	if trusted.SpanContext().TraceID().String() != traceID || trusted.Parent().SpanID().String() != spanID || len(trusted.Links()) != 0 {
		t.Errorf("trusting its caller, the span is in trace %s under %s with links %+v; want the caller's span as its parent",
			trusted.SpanContext().TraceID(), trusted.Parent().SpanID(), trusted.Links())
	}
	if downstream[:36] != caller[:36] {
		t.Errorf("trusting its caller, the downstream is sent %q, not the caller's trace", downstream)
	}

	action.Annotations = nil
	alone, _ := call(false)
	if alone.Parent().IsValid() || len(alone.Links()) != 0 {
		t.Errorf("without a caller's context the span has the parent %s and links %+v", alone.Parent().SpanID(), alone.Links())
	}
	action.Annotations = map[string]string{v1alpha1.TraceparentAnnotation: caller}

	otel.SetTracerProvider(noop.NewTracerProvider())
	for trustCaller, want := range map[bool]string{false: "", true: caller} {
		var req adapter.Request
		_, span := startCallSpan(context.Background(), action, operationAttempt, &req, trustCaller)
		span.End()
		if req.Traceparent != want {
			t.Errorf("without a tracer provider, trusting the caller %v: the downstream is sent %q, want %q", trustCaller, req.Traceparent, want)
		}
	}
}

// An event carries its caller's trace context only where the manager trusts
// it: a consumer that continues the event's trace would otherwise join any
// trace a tenant named.
func TestEventTraceparent(t *testing.T) {
	const caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	action := &v1alpha1.ToolAction{}
	action.Annotations = map[string]string{v1alpha1.TraceparentAnnotation: caller}
	for trust, want := range map[bool]string{false: "", true: caller} {
		if got := (&Ledger{trustCallerTrace: trust}).eventTraceparent(action); got != want {
			t.Errorf("trusting the caller %v: the event carries %q, want %q", trust, got, want)
		}
	}
}

// The trace context an action's caller supplied is the last invocation's,
// from its annotation, unless that is no W3C traceparent; then the
// provenance's.
func TestCallerTraceparent(t *testing.T) {
	const (
		invocation = "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01"
		provenance = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	)
	for annotation, want := range map[string]string{
		invocation:                    invocation,
		"":                            provenance,
		"not-a-traceparent":           provenance,
		"00-" + invocation[3:] + "-x": provenance,
	} {
		a := &v1alpha1.ToolAction{}
		a.Annotations = map[string]string{v1alpha1.TraceparentAnnotation: annotation}
		a.Spec.Provenance = &v1alpha1.Provenance{TraceID: provenance}
		if got := callerTraceparent(a); got != want {
			t.Errorf("annotation %q: %q, want %q", annotation, got, want)
		}
	}
	if got := callerTraceparent(&v1alpha1.ToolAction{}); got != "" {
		t.Errorf("no annotation, no provenance: %q, want none", got)
	}
}
