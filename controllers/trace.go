package controllers

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/adapter"
	"github.com/toolledger/toolledger/pkg/tracing"
)

// startCallSpan starts the span of one downstream call of action (an
// attempt or a lookup) and gives req its traceparent, so that the
// downstream continues the trace. The caller's trace context is the span
// of the invocation that applied the action (its traceparent annotation),
// or else spec.provenance.traceID when that is a traceparent.
//
// A tenant writes that context, and may name any trace, another tenant's
// too; so, as OpenTelemetry advises for context from an untrusted caller,
// the span starts a trace of its own and links to the caller's, marked as
// caller-supplied (tracing.CallerSupplied). Where the platform trusts its
// tenants (trustCaller), the caller's span is the parent instead. Without
// a tracer provider nothing is recorded: a trusted caller's traceparent
// goes downstream unchanged, an untrusted one's not at all.
func startCallSpan(ctx context.Context, action *v1alpha1.ToolAction, operation string, req *adapter.Request, trustCaller bool) (context.Context, trace.Span) {
	name, attrs := "lookup "+action.Spec.ToolRef.Name, []attribute.KeyValue{
		tracing.Operation.String(operation),
		tracing.GenAIToolName.String(action.Spec.ToolRef.Name),
		tracing.ToolKind.String(action.Spec.ToolRef.KindOrDefault()),
		tracing.Namespace.String(action.Namespace),
		tracing.Key.String(action.Name),
		tracing.RequestDigest.String(action.Status.RequestDigest),
		tracing.Attempt.Int64(int64(action.Status.Attempts)),
	}
	if operation == operationAttempt {
		name = tracing.OperationExecuteTool + " " + action.Spec.ToolRef.Name
		attrs = append(attrs, tracing.GenAIOperationName.String(tracing.OperationExecuteTool), tracing.GenAIToolType.String(tracing.ToolTypeExtension))
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...)}
	if caller := callerTraceparent(action); trustCaller {
		ctx = tracing.ContextWithTraceparent(ctx, caller, "")
	} else {
		opts = append(opts, trace.WithNewRoot())
		if caller != "" {
			opts = append(opts, trace.WithLinks(trace.Link{
				SpanContext: tracing.SpanContext(caller), Attributes: []attribute.KeyValue{tracing.CallerSupplied.Bool(true)}}))
		}
	}
	ctx, span := tracing.Tracer().Start(ctx, name, opts...)
	req.Traceparent = tracing.Traceparent(ctx)
	return ctx, span
}

// endCallSpan records what the downstream's answer means (result, as the
// metrics name it) and ends the span.
func endCallSpan(span trace.Span, result string, outcome adapter.Outcome, err error) {
	span.SetAttributes(tracing.Result.String(result))
	if outcome.ExternalRef != "" {
		span.SetAttributes(tracing.ExternalRef.String(outcome.ExternalRef))
	}
	if outcome.Replayed {
		span.SetAttributes(tracing.Replayed.Bool(true))
	}
	// A lookup's proof of absence is an answer, not an error.
	if err != nil && !errors.Is(err, adapter.ErrNotFound) {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// callerTraceparent is the trace context the action's caller supplied:
// the last invocation's traceparent, else the provenance's; one that is
// not a valid W3C traceparent is passed over.
func callerTraceparent(action *v1alpha1.ToolAction) string {
	if tp := tracing.ValidTraceparent(action.Annotations[v1alpha1.TraceparentAnnotation]); tp != "" {
		return tp
	}
	if p := action.Spec.Provenance; p != nil {
		return tracing.ValidTraceparent(p.TraceID)
	}
	return ""
}
