package sdk

import (
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/tracing"
)

// endInvokeSpan records what the invocation found and ends its span: the
// phase, whether it was deduplicated and what settled it, the downstream's
// reference; an error, or an outcome that is not a success to report, sets
// the span's status.
func endInvokeSpan(span trace.Span, o *Outcome, err error) {
	if o != nil {
		span.SetAttributes(
			tracing.Phase.String(string(o.Phase)),
			tracing.Deduplicated.Bool(o.Deduplicated),
			tracing.Attempt.Int64(int64(o.Attempts)),
		)
		if o.RequestDigest != "" {
			span.SetAttributes(tracing.RequestDigest.String(o.RequestDigest))
		}
		if o.ExternalRef != "" {
			span.SetAttributes(tracing.ExternalRef.String(o.ExternalRef))
		}
		if o.ErrorClass != "" {
			span.SetAttributes(tracing.ErrorClass.String(string(o.ErrorClass)))
		}
		if o.SettledBy != "" {
			span.SetAttributes(tracing.SettledBy.String(o.SettledBy))
		}
	}
	switch {
	case err != nil:
		span.SetStatus(codes.Error, err.Error())
	case o != nil && (o.Phase == v1alpha1.PhaseFailed || o.Phase == v1alpha1.PhaseEscalated):
		span.SetStatus(codes.Error, o.Message)
	}
	span.End()
}
