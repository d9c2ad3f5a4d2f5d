// Package tracing names what the ledger's OpenTelemetry spans carry and
// moves W3C trace context in and out of the places the ledger keeps it. It
// needs only the OpenTelemetry API: spans are recorded once the program
// installs a tracer provider (the manager and the MCP gateway do from the
// OTEL_* environment variables; an agent does its own), and cost nothing
// otherwise.
//
// The spans follow OpenTelemetry's GenAI conventions where they fit
// (gen_ai.operation.name execute_tool, gen_ai.tool.name) and keep the
// ledger's own facts under toolledger.*: the conventions reserve gen_ai.*
// for what they define, so the idempotency key is never put there.
package tracing

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// InstrumentationName names the tracer of every toolledger span.
const InstrumentationName = "github.com/toolledger/toolledger"

// The GenAI attributes the spans set (OpenTelemetry semantic conventions
// for generative AI, execute_tool).
const (
	GenAIOperationName = attribute.Key("gen_ai.operation.name")
	GenAIToolName      = attribute.Key("gen_ai.tool.name")
	GenAIToolType      = attribute.Key("gen_ai.tool.type")
	// OperationExecuteTool is gen_ai.operation.name of a tool's execution.
	OperationExecuteTool = "execute_tool"
	// ToolTypeExtension is gen_ai.tool.type of a tool that calls an
	// external API, as every toolledger tool does.
	ToolTypeExtension = "extension"
)

// The ledger's own attributes.
const (
	// Namespace is the action's namespace: its tenant.
	Namespace = attribute.Key("toolledger.namespace")
	// Key is the action's idempotency key (its name).
	Key = attribute.Key("toolledger.key")
	// ToolKind is Tool or ClusterTool.
	ToolKind = attribute.Key("toolledger.tool.kind")
	// RequestDigest is the request's digest, sha256:….
	RequestDigest = attribute.Key("toolledger.request_digest")
	// Attempt is the attempt's number, from 1; a lookup's is the attempt it
	// looks up.
	Attempt = attribute.Key("toolledger.attempt")
	// Operation is attempt or lookup.
	Operation = attribute.Key("toolledger.operation")
	// Result is what the downstream's answer means: succeeded, failed,
	// retryable or unknown for an attempt; found, absent or inconclusive
	// for a lookup.
	Result = attribute.Key("toolledger.result")
	// Replayed says the downstream answered with the stored outcome of an
	// earlier request under the key: it deduplicated.
	Replayed = attribute.Key("toolledger.replayed")
	// ExternalRef is the downstream's identifier of the effect.
	ExternalRef = attribute.Key("toolledger.external_ref")
	// Phase is the action's phase when the invocation returned.
	Phase = attribute.Key("toolledger.phase")
	// Deduplicated says the invocation found the intent already recorded
	// (or its record's tombstone or archived copy) and caused no effect.
	Deduplicated = attribute.Key("toolledger.deduplicated")
	// SettledBy is the reason of the outcome's condition: FoundByLookup,
	// SettledByTombstone or SettledByArchive say what settled it besides
	// an attempt of its own.
	SettledBy = attribute.Key("toolledger.settled_by")
	// ErrorClass is the class of the action's error, when it has one.
	ErrorClass = attribute.Key("toolledger.error_class")
	// CallerSupplied marks a span link to a trace context the caller
	// supplied (the action's traceparent annotation or provenance), which
	// the manager related its span to without taking it as the parent: a
	// caller may name any trace, another tenant's too.
	CallerSupplied = attribute.Key("toolledger.caller_supplied")
)

// The values of Operation.
const (
	OperationAttempt = "attempt"
	OperationLookup  = "lookup"
)

// Tracer is the tracer of the ledger's spans, from the global provider:
// spans are recorded from the moment the program installs one.
func Tracer() trace.Tracer {
	return otel.GetTracerProvider().Tracer(InstrumentationName)
}

var w3c = propagation.TraceContext{}

// ContextWithTraceparent returns ctx with the remote span a W3C traceparent
// (and tracestate, which may be empty) names as the parent of the spans
// started from it; ctx unchanged when traceparent is not a valid one.
func ContextWithTraceparent(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	carrier := propagation.MapCarrier{"traceparent": traceparent}
	if tracestate != "" {
		carrier["tracestate"] = tracestate
	}
	return w3c.Extract(ctx, carrier)
}

// SpanContext is the remote span a W3C traceparent names; invalid when
// traceparent is not a valid one.
func SpanContext(traceparent string) trace.SpanContext {
	return trace.SpanContextFromContext(ContextWithTraceparent(context.Background(), traceparent, ""))
}

// Traceparent is the W3C traceparent of ctx's span, recording or remote;
// "" when ctx has none.
func Traceparent(ctx context.Context) string {
	carrier := propagation.MapCarrier{}
	w3c.Inject(ctx, carrier)
	return carrier["traceparent"]
}
