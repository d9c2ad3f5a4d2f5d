package mcpgateway

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolledger/toolledger/pkg/tracing"
)

// The MCP attributes of the gateway's span, as OpenTelemetry's conventions
// for MCP name them.
const (
	mcpMethodName = attribute.Key("mcp.method.name")
	methodCall    = "tools/call"
)

// tracedCall is call inside a server span (tools/call <tool>), a child of
// the span the client names in params._meta.traceparent (and tracestate),
// as OpenTelemetry's MCP conventions carry it. The ledger's invocation, and
// through it the manager's attempt, continue the span.
func (g *Gateway) tracedCall(ctx context.Context, e *entry, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	meta := req.Params.Meta
	ctx = tracing.ContextWithTraceparent(ctx, metaString(meta, "traceparent"), metaString(meta, "tracestate"))
	ctx, span := tracing.Tracer().Start(ctx, methodCall+" "+e.tool.Name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		mcpMethodName.String(methodCall),
		tracing.GenAIOperationName.String(tracing.OperationExecuteTool),
		tracing.GenAIToolName.String(e.tool.Name),
		tracing.ToolKind.String(e.ref.KindOrDefault()),
		tracing.Namespace.String(g.opts.Namespace),
	))
	defer span.End()
	res, err := g.call(ctx, e, req)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return nil, err
	}
	if out, ok := res.StructuredContent.(Outcome); ok {
		if out.Key != "" {
			span.SetAttributes(tracing.Key.String(out.Key))
		}
		span.SetAttributes(tracing.Phase.String(out.Phase), tracing.Deduplicated.Bool(out.Deduplicated))
		if out.ErrorClass != "" {
			span.SetAttributes(tracing.ErrorClass.String(out.ErrorClass))
		}
	}
	if res.IsError {
		span.SetStatus(codes.Error, "the tool call returned an error result")
	}
	return res, nil
}
