package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// IdempotencyClass says whether and how an operation may be repeated.
// +kubebuilder:validation:Enum=ReadOnly;NaturallyIdempotent;KeyProtected;Compensatable;NonRepeatable
type IdempotencyClass string

const (
	// ReadOnly operations have no effect and may be retried freely.
	ReadOnly IdempotencyClass = "ReadOnly"
	// NaturallyIdempotent operations set a desired state; repeating them under the same key is harmless.
	NaturallyIdempotent IdempotencyClass = "NaturallyIdempotent"
	// KeyProtected operations are deduplicated downstream by the idempotency key.
	KeyProtected IdempotencyClass = "KeyProtected"
	// Compensatable operations are never repeated blindly; they can be offset by a new action.
	Compensatable IdempotencyClass = "Compensatable"
	// NonRepeatable operations can be neither undone nor deduplicated; an unknown outcome needs a human.
	NonRepeatable IdempotencyClass = "NonRepeatable"
)

// HTTPHeader is a static header sent with every request.
type HTTPHeader struct {
	// name is the header name.
	// +required
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9!#$%&'*+.^_|~-]+$`
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`

	// value is the header value. Use authHeader for credentials.
	// +required
	// +kubebuilder:validation:MaxLength=4096
	Value string `json:"value"`
}

// SecretKeySelector selects a key of a Secret in the Tool's namespace.
type SecretKeySelector struct {
	// name is the name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// key is the key within the Secret's data.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`
}

// SecretHeader is a header whose value is read from a Secret.
type SecretHeader struct {
	// name is the header name.
	// +optional
	// +kubebuilder:default=Authorization
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9!#$%&'*+.^_|~-]+$`
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name,omitempty"`

	// secretKeyRef selects the Secret key that holds the complete header value,
	// for example "Bearer <token>".
	// +required
	SecretKeyRef SecretKeySelector `json:"secretKeyRef"`
}

// HTTPLookup is the call that finds an earlier request by its idempotency key.
type HTTPLookup struct {
	// url is the lookup endpoint. The placeholder {key} is replaced by the
	// URL-escaped idempotency key; the key is also sent as the Idempotency-Key
	// header. 200 means found, 404 means definitely absent.
	// +required
	// +kubebuilder:validation:Pattern=`^https?://`
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url"`
}

// HTTPResponse says which fields of a JSON response are kept.
type HTTPResponse struct {
	// externalIDPointer is the JSON Pointer (RFC 6901) of the downstream's
	// identifier of the effect, for example "/id".
	// +optional
	// +kubebuilder:validation:Pattern=`^(/[^/]*)*$`
	// +kubebuilder:validation:MaxLength=256
	ExternalIDPointer string `json:"externalIDPointer,omitempty"`

	// resultPointers are the JSON Pointers of the response fields stored in
	// the action's status.result, at their original paths. Nothing else of the
	// response is stored, so secrets or personal data are not copied into the ledger.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:Pattern=`^(/[^/]*)+$`
	// +kubebuilder:validation:items:MaxLength=256
	ResultPointers []string `json:"resultPointers,omitempty"`
}

// HTTPAdapter calls an HTTP(S) endpoint once per intent, with the action's
// parameters as the JSON body and its idempotency key in the Idempotency-Key header.
type HTTPAdapter struct {
	// url is the endpoint that performs the operation.
	// +required
	// +kubebuilder:validation:Pattern=`^https?://`
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url"`

	// method is the HTTP method.
	// +optional
	// +kubebuilder:default=POST
	// +kubebuilder:validation:Enum=POST;PUT;PATCH;DELETE
	Method string `json:"method,omitempty"`

	// headers are static headers sent with every request.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	Headers []HTTPHeader `json:"headers,omitempty"`

	// authHeader is a header, typically Authorization, read from a Secret in
	// the Tool's namespace.
	// +optional
	AuthHeader *SecretHeader `json:"authHeader,omitempty"`

	// timeout bounds one attempt, 5m at most. A request still unanswered
	// then has an unknown outcome, which is reconciled rather than re-sent.
	// An operation that takes longer is modelled as two tools: one that
	// starts it and returns its identifier, and one that reads its state.
	// +optional
	// +kubebuilder:default="10s"
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('5m')",message="timeout must be more than 0s and at most 5m: model a longer operation as a tool that starts it and one that reads its state"
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// lookup finds an earlier request by its idempotency key.
	// +optional
	Lookup *HTTPLookup `json:"lookup,omitempty"`

	// response says which fields of the JSON response are kept.
	// +optional
	Response HTTPResponse `json:"response,omitempty"`
}

// RetryPolicy bounds the attempts of requests that definitely did not apply.
type RetryPolicy struct {
	// maxAttempts is the number of dispatches allowed, the first included.
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	MaxAttempts int32 `json:"maxAttempts,omitempty"`

	// initialBackoff is the delay before the first retry; it doubles on each
	// further retry, with jitter, unless the downstream sends Retry-After.
	// +optional
	// +kubebuilder:default="1s"
	InitialBackoff *metav1.Duration `json:"initialBackoff,omitempty"`

	// maxBackoff caps the delay between attempts, Retry-After included.
	// +optional
	// +kubebuilder:default="5m"
	MaxBackoff *metav1.Duration `json:"maxBackoff,omitempty"`
}

// DispatchLimits bound the calls a tool's downstream receives from one
// manager replica: attempts and lookups alike. An action beyond them waits,
// in order, without holding a worker; nothing about the wait is written.
type DispatchLimits struct {
	// maxInFlight is the most calls in flight at once.
	// +optional
	// +kubebuilder:default=16
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxInFlight int32 `json:"maxInFlight,omitempty"`

	// requestsPerSecond is the most calls started a second, in bursts of
	// up to maxInFlight. Divide a provider's limit by the replicas that
	// call it: 25 keeps two replicas within half of a 100/s limit.
	// +optional
	// +kubebuilder:default=25
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	RequestsPerSecond int32 `json:"requestsPerSecond,omitempty"`
}

// The defaults of spec.limits. The API server applies them to new Tools;
// the controller applies them to Tools stored before limits existed.
const (
	DefaultMaxInFlight       = 16
	DefaultRequestsPerSecond = 25
)

// WithDefaults is l with the defaults in place of unset members.
func (l DispatchLimits) WithDefaults() DispatchLimits {
	if l.MaxInFlight <= 0 {
		l.MaxInFlight = DefaultMaxInFlight
	}
	if l.RequestsPerSecond <= 0 {
		l.RequestsPerSecond = DefaultRequestsPerSecond
	}
	return l
}

// ToolSpec is the tool contract. Exactly one adapter member (http) says how
// the operation is performed; see AdapterName.
// +kubebuilder:validation:XValidation:rule="[has(self.http)].filter(set, set).size() == 1",message="exactly one adapter must be set (http)"
// +kubebuilder:validation:XValidation:rule="!has(self.recordRetention) || !has(self.keyRetention) || duration(self.recordRetention) <= duration(self.keyRetention)",message="recordRetention must not exceed keyRetention: the key is kept at least as long as the record"
type ToolSpec struct {
	// operation is the name of the operation, such as "payments.charge".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$`
	Operation string `json:"operation"`

	// version is the version of the operation's contract; it enters the
	// request digest, so a new version is a new intent.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Version string `json:"version"`

	// idempotencyClass says whether and how the operation may be repeated.
	// +required
	IdempotencyClass IdempotencyClass `json:"idempotencyClass"`

	// http is the HTTP adapter that performs the operation. It is one member
	// of the adapter union: exactly one member is set.
	// +optional
	HTTP *HTTPAdapter `json:"http,omitempty"`

	// retry bounds the attempts of requests that definitely did not apply.
	// +optional
	// +kubebuilder:default={}
	Retry RetryPolicy `json:"retry,omitempty"`

	// limits bound the calls in flight and the calls a second that one
	// manager replica makes to the downstream.
	// +optional
	// +kubebuilder:default={}
	Limits DispatchLimits `json:"limits,omitempty"`

	// unknownOutcomeDeadline is how long an unknown outcome is looked up by
	// key before the action is escalated to a human (phase Escalated).
	// +optional
	// +kubebuilder:default="10m"
	UnknownOutcomeDeadline *metav1.Duration `json:"unknownOutcomeDeadline,omitempty"`

	// parametersSchema is the OpenAPI v3 schema (the subset Kubernetes CRDs
	// use: type, properties, required, enum, minimum, maximum, minLength,
	// maxLength, pattern, items, additionalProperties, ...) that an action's
	// parameters must satisfy before anything is dispatched. A violation
	// fails the action with InvalidInput, naming the field.
	// +optional
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	ParametersSchema *apiextensionsv1.JSON `json:"parametersSchema,omitempty"`

	// approvalRequired holds every action of this tool before its first
	// dispatch (phase AwaitingApproval, Approved=Unknown) until a ToolApproval
	// of its key and request digest is applied. Approved, it is dispatched,
	// and retried or looked up under its key with no new approval; denied, it
	// fails with class Denied and is never dispatched.
	// +optional
	ApprovalRequired bool `json:"approvalRequired,omitempty"`

	// selfApprovalAllowed lets the user who created an action
	// (toolledger.dev/requested-by) approve it too. Off by default: the
	// separation of duties refuses such an approval and the action keeps
	// waiting for someone else's.
	// +optional
	SelfApprovalAllowed bool `json:"selfApprovalAllowed,omitempty"`

	// recordRetention is how long a finished action's full record is kept
	// after completion. The record is then deleted; an action that was
	// dispatched leaves a Tombstone, which keeps its key until keyRetention.
	// Unset keeps records until keyRetention, or until someone deletes them.
	// +optional
	RecordRetention *metav1.Duration `json:"recordRetention,omitempty"`

	// keyRetention is how long a key stays taken after its action finished,
	// by the record or, once that is gone, by its Tombstone. Until then the
	// key is never dispatched again; after it the record and the tombstone
	// are deleted and the name means a new intent. Unset keeps tombstones
	// until an administrator deletes them. Keep it at least as long as
	// callers, GitOps syncs and backups may bring the key back.
	// +optional
	KeyRetention *metav1.Duration `json:"keyRetention,omitempty"`

	// consequentialFields are the JSON Pointers (RFC 6901) of the parameters
	// that make up the intent; only they enter the request digest, so a
	// harmless field such as a memo does not make a different intent. Empty
	// means every parameter is consequential. All parameters are still sent.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:Pattern=`^(/[^/]*)+$`
	// +kubebuilder:validation:items:MaxLength=256
	ConsequentialFields []string `json:"consequentialFields,omitempty"`
}

// AdapterHTTP names the HTTP adapter, the member spec.http.
const AdapterHTTP = "http"

// AdapterName names the adapter a tool uses: the member of the adapter union
// that is set, or "" when none is (the API server refuses such a Tool).
func AdapterName(spec *ToolSpec) string {
	if spec.HTTP != nil {
		return AdapterHTTP
	}
	return ""
}

// MCPHints are the Model Context Protocol tool annotations that follow from
// a tool's idempotency class, so a gateway can publish them honestly.
type MCPHints struct {
	// readOnlyHint: the tool does not modify its environment.
	ReadOnlyHint bool `json:"readOnlyHint"`
	// destructiveHint: the tool may perform updates that cannot be undone.
	DestructiveHint bool `json:"destructiveHint"`
	// idempotentHint: calling it repeatedly with the same arguments has no additional effect.
	IdempotentHint bool `json:"idempotentHint"`
	// openWorldHint: the tool interacts with an external system.
	OpenWorldHint bool `json:"openWorldHint"`
}

// Hints maps an idempotency class to MCP tool annotations:
//
//	class                readOnly destructive idempotent openWorld
//	ReadOnly             true     false       true       true
//	NaturallyIdempotent  false    false       true       true
//	KeyProtected         false    false       true       true
//	Compensatable        false    false       false      true
//	NonRepeatable        false    true        false      true
//
// KeyProtected counts as idempotent because toolledger sends every repeat
// under the same key; Compensatable is not destructive because a new action
// can offset it.
func (c IdempotencyClass) Hints() MCPHints {
	return MCPHints{
		ReadOnlyHint:    c == ReadOnly,
		DestructiveHint: c == NonRepeatable,
		IdempotentHint:  c == ReadOnly || c == NaturallyIdempotent || c == KeyProtected,
		OpenWorldHint:   true,
	}
}

// Condition type of a Tool.
const (
	// ConditionToolReady is True when the tool can be used: its schema
	// compiles and its adapter's own checks pass (for http: its URLs, and
	// that its Secret and key exist).
	ConditionToolReady = "Ready"
)

// ToolStatus says whether the tool can be used.
type ToolStatus struct {
	// observedGeneration is the generation of the spec this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions hold Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// mcpHints are the MCP tool annotations that follow from the idempotency class.
	// +optional
	MCPHints *MCPHints `json:"mcpHints,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=toolledger
// +kubebuilder:printcolumn:name="Operation",type=string,JSONPath=`.spec.operation`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.version`
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=`.spec.idempotencyClass`
// +kubebuilder:printcolumn:name="Adapter",type=string,JSONPath=`.spec.http.url`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// Tool is a catalog entry: what an operation does, whether it may be
// repeated, and how the controller performs it. Tenants reference tools from
// ToolActions; they never choose URLs or credentials themselves.
type Tool struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the tool contract.
	// +required
	Spec ToolSpec `json:"spec"`

	// status says whether the tool can be used.
	// +optional
	Status ToolStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ToolList is a list of Tools.
type ToolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Tool `json:"items"`
}
