package testenv

import (
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// ToolOption changes a Tool that NewTool builds.
type ToolOption func(*v1alpha1.Tool)

// NewTool builds a payments tool that the harnesses' downstreams serve:
// operation payments.charge v1, KeyProtected, an HTTP request to url whose
// response's "/id" is the external reference. Everything else is the API
// server's default unless an option sets it; options apply in order, so a
// later one wins.
func NewTool(namespace, name, url string, opts ...ToolOption) *v1alpha1.Tool {
	tool := &v1alpha1.Tool{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: v1alpha1.ToolSpec{
			Operation:        "payments.charge",
			Version:          "v1",
			IdempotencyClass: v1alpha1.KeyProtected,
			HTTP: &v1alpha1.HTTPAdapter{
				URL:      url,
				Response: v1alpha1.HTTPResponse{ExternalIDPointer: "/id"},
			},
		},
	}
	for _, opt := range opts {
		opt(tool)
	}
	return tool
}

// WithOperation sets the operation.
func WithOperation(operation string) ToolOption {
	return func(t *v1alpha1.Tool) { t.Spec.Operation = operation }
}

// WithClass sets the idempotency class.
func WithClass(class v1alpha1.IdempotencyClass) ToolOption {
	return func(t *v1alpha1.Tool) { t.Spec.IdempotencyClass = class }
}

// WithTimeout bounds each attempt.
func WithTimeout(d time.Duration) ToolOption {
	return func(t *v1alpha1.Tool) { t.Spec.HTTP.Timeout = &metav1.Duration{Duration: d} }
}

// WithLimits sets the calls in flight and the calls a second that one
// manager makes to the tool's downstream.
func WithLimits(maxInFlight, requestsPerSecond int32) ToolOption {
	return func(t *v1alpha1.Tool) {
		t.Spec.Limits = v1alpha1.DispatchLimits{MaxInFlight: maxInFlight, RequestsPerSecond: requestsPerSecond}
	}
}

// WithKeyLookup adds the lookup by key that the demo downstream and the
// benchmarks' counting downstream serve beside the tool's URL:
// {url}/by-key/{key}.
func WithKeyLookup() ToolOption {
	return func(t *v1alpha1.Tool) {
		t.Spec.HTTP.Lookup = &v1alpha1.HTTPLookup{URL: t.Spec.HTTP.URL + "/by-key/{key}", NotFoundMeansAbsent: true}
	}
}

// WithCommittedLookup adds the demo downstream's lookup of committed
// charges, whose 404 the Tool takes for absence as the sample payments Tool
// does, although a request still in progress commits later.
func WithCommittedLookup() ToolOption {
	return func(t *v1alpha1.Tool) {
		t.Spec.HTTP.Lookup = &v1alpha1.HTTPLookup{URL: t.Spec.HTTP.URL + "/committed/{key}", NotFoundMeansAbsent: true}
	}
}

// WithoutLookup removes the lookup, so that an unknown outcome cannot be
// looked up.
func WithoutLookup() ToolOption {
	return func(t *v1alpha1.Tool) { t.Spec.HTTP.Lookup = nil }
}

// WithResultPointers keeps these fields of the response in the action's result.
func WithResultPointers(pointers ...string) ToolOption {
	return func(t *v1alpha1.Tool) { t.Spec.HTTP.Response.ResultPointers = pointers }
}

// WithAuthSecret sends the Authorization header read from key of the Secret
// name in the tool's namespace.
func WithAuthSecret(name, key string) ToolOption {
	return func(t *v1alpha1.Tool) {
		t.Spec.HTTP.AuthHeader = &v1alpha1.SecretHeader{SecretKeyRef: v1alpha1.SecretKeySelector{Name: name, Key: key}}
	}
}

// WithMaxAttempts bounds the dispatches, the first included.
func WithMaxAttempts(n int32) ToolOption {
	return func(t *v1alpha1.Tool) { t.Spec.Retry.MaxAttempts = n }
}

// WithBackoff sets the delay before the first retry and the cap of the delays.
func WithBackoff(initial, maximum time.Duration) ToolOption {
	return func(t *v1alpha1.Tool) {
		t.Spec.Retry.InitialBackoff = &metav1.Duration{Duration: initial}
		t.Spec.Retry.MaxBackoff = &metav1.Duration{Duration: maximum}
	}
}

// WithUnknownOutcomeDeadline sets how long an unknown outcome is looked up
// before the action is escalated.
func WithUnknownOutcomeDeadline(d time.Duration) ToolOption {
	return func(t *v1alpha1.Tool) { t.Spec.UnknownOutcomeDeadline = &metav1.Duration{Duration: d} }
}

// WithParametersSchema sets the JSON schema that parameters must satisfy.
func WithParametersSchema(schema string) ToolOption {
	return func(t *v1alpha1.Tool) { t.Spec.ParametersSchema = &apiextensionsv1.JSON{Raw: []byte(schema)} }
}

// WithConsequentialFields limits the request digest to these parameters.
func WithConsequentialFields(pointers ...string) ToolOption {
	return func(t *v1alpha1.Tool) { t.Spec.ConsequentialFields = pointers }
}

// WithApprovalRequired holds every action of the tool for an approval.
func WithApprovalRequired() ToolOption {
	return func(t *v1alpha1.Tool) { t.Spec.ApprovalRequired = true }
}

// WithClientKeyRequired makes the gateways refuse a call without a key of
// its caller's own.
func WithClientKeyRequired() ToolOption {
	return func(t *v1alpha1.Tool) { t.Spec.ClientKeyRequired = true }
}

// WithSelfApprovalAllowed lets an action's requester approve it.
func WithSelfApprovalAllowed() ToolOption {
	return func(t *v1alpha1.Tool) { t.Spec.SelfApprovalAllowed = true }
}

// WithKeyRetention frees keys (deleting their records and tombstones) once
// d has passed since their actions finished.
func WithKeyRetention(d time.Duration) ToolOption {
	return func(t *v1alpha1.Tool) { t.Spec.KeyRetention = &metav1.Duration{Duration: d} }
}

// WithDownstreamKeyRetention declares that the downstream keeps the keys
// it is sent for d.
func WithDownstreamKeyRetention(d time.Duration) ToolOption {
	return func(t *v1alpha1.Tool) { t.Spec.DownstreamKeyRetention = &metav1.Duration{Duration: d} }
}

// WithRecordRetention replaces finished records by their tombstones once d
// has passed since they finished.
func WithRecordRetention(d time.Duration) ToolOption {
	return func(t *v1alpha1.Tool) { t.Spec.RecordRetention = &metav1.Duration{Duration: d} }
}

// ChargeManifest is the YAML of a ToolAction of the tool "charge", as an
// operator applies it with kubectl: amount in EUR for customer.
func ChargeManifest(namespace, name string, amount int64, customer string) string {
	return fmt.Sprintf(`apiVersion: toolledger.dev/v1alpha1
kind: ToolAction
metadata:
  name: %s
  namespace: %s
spec:
  toolRef:
    name: charge
  parameters:
    amount: %d
    currency: EUR
    customer: %s
`, name, namespace, amount, customer)
}
