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

// SecretReference names a Secret in the Tool's namespace.
type SecretReference struct {
	// name is the name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// HTTPTLS says how a Tool's https:// connections are verified and which
// client certificate they present. Its Secrets live in the Tool's namespace
// (a ClusterTool's in the operator's) and must carry the label
// toolledger.dev/tool-credential=true; no other Secret is usable.
// +kubebuilder:validation:XValidation:rule="has(self.caBundle) || has(self.clientCertificateSecretRef) || has(self.serverName)",message="tls needs caBundle, clientCertificateSecretRef or serverName"
type HTTPTLS struct {
	// caBundle selects the key of a labelled Secret that holds the PEM CA
	// certificates the server's certificate must chain to. They replace
	// the system roots for this Tool: a private CA is trusted by the Tools
	// that name it only. Unset, the system roots verify the server.
	// +optional
	CABundle *SecretKeySelector `json:"caBundle,omitempty"`

	// clientCertificateSecretRef names a labelled Secret of type
	// kubernetes.io/tls whose tls.crt (the certificate, then any
	// intermediates) and tls.key are presented to servers that ask for a
	// client certificate (mutual TLS).
	// +optional
	ClientCertificateSecretRef *SecretReference `json:"clientCertificateSecretRef,omitempty"`

	// serverName is the name the server's certificate is verified against
	// and sent in SNI, instead of the URL's host: for a server reached by an
	// address or an internal name its certificate does not carry.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ServerName string `json:"serverName,omitempty"`
}

// HTTPLookupStrategy says how an earlier request is found.
// +kubebuilder:validation:Enum=Key;Reference;Replay
type HTTPLookupStrategy string

const (
	// LookupByKey asks an endpoint for the request of the idempotency key.
	LookupByKey HTTPLookupStrategy = "Key"
	// LookupByReference searches by a business reference taken from the
	// parameters, for downstreams that take no idempotency key.
	LookupByReference HTTPLookupStrategy = "Reference"
	// LookupByReplay re-sends the request under the same key, for providers
	// that replay the stored response of a key within a window.
	LookupByReplay HTTPLookupStrategy = "Replay"
)

// HTTPLookupMatch is one rule a candidate must satisfy to be the effect.
type HTTPLookupMatch struct {
	// field is the JSON Pointer of the value in the candidate, such as "/correlation_id".
	// +required
	// +kubebuilder:validation:Pattern=`^(/[^/]*)+$`
	// +kubebuilder:validation:MaxLength=256
	Field string `json:"field"`

	// parameter is the JSON Pointer of the parameter it must equal, such as "/incident".
	// +required
	// +kubebuilder:validation:Pattern=`^(/[^/]*)+$`
	// +kubebuilder:validation:MaxLength=256
	Parameter string `json:"parameter"`
}

// HTTPLookup finds an earlier request. Only an answer that proves the effect
// is "found"; only an answer the Tool says proves absence is "absent", which
// lets the request be sent again; anything else is inconclusive and looked
// up again until the tool's unknownOutcomeDeadline, then escalated.
// +kubebuilder:validation:XValidation:rule="(has(self.strategy) && self.strategy == 'Replay') ? (!has(self.url) && has(self.replayWindow)) : (has(self.url) && !has(self.replayWindow))",message="a Replay lookup takes replayWindow and no url; a Key or Reference lookup takes a url and no replayWindow"
// +kubebuilder:validation:XValidation:rule="!has(self.strategy) || self.strategy != 'Reference' || (has(self.match) && size(self.match) > 0)",message="a Reference lookup needs at least one match rule"
// +kubebuilder:validation:XValidation:rule="!has(self.strategy) || self.strategy != 'Replay' || (!has(self.match) && !has(self.itemsPointer) && !has(self.notFoundMeansAbsent) && !has(self.noMatchMeansAbsent))",message="a Replay lookup takes no match, itemsPointer, notFoundMeansAbsent or noMatchMeansAbsent"
type HTTPLookup struct {
	// strategy is how the request is found: Key (GET the request of the
	// idempotency key), Reference (GET or search by a business reference
	// from the parameters) or Replay (send the request again under the same
	// key while the provider replays stored responses).
	// +optional
	// +kubebuilder:default=Key
	Strategy HTTPLookupStrategy `json:"strategy,omitempty"`

	// url is the lookup endpoint, called with GET and the key's header. The
	// placeholder {key} is replaced by the escaped idempotency key and
	// {name} by the escaped top-level parameter name, for example
	// "https://tickets.example/api/tickets?correlation_id={incident}".
	// +optional
	// +kubebuilder:validation:Pattern=`^https?://`
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url,omitempty"`

	// itemsPointer is the JSON Pointer of the list of candidates in a 200
	// answer, such as "/data" or "" for a body that is the list itself.
	// Unset, the body is the one candidate.
	// +optional
	// +kubebuilder:validation:Pattern=`^(/[^/]*)*$`
	// +kubebuilder:validation:MaxLength=256
	ItemsPointer *string `json:"itemsPointer,omitempty"`

	// match are the rules a candidate must satisfy, all of them, to be the
	// effect; with none, any candidate is. The candidate must also yield
	// the external id when response.externalIDPointer is set.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	Match []HTTPLookupMatch `json:"match,omitempty"`

	// notFoundMeansAbsent makes a 404 prove that the request was never
	// applied. Set it only when the endpoint itself answers 404 for an
	// unknown key: an ingress or a proxy also answers 404.
	// +optional
	NotFoundMeansAbsent bool `json:"notFoundMeansAbsent,omitempty"`

	// noMatchMeansAbsent makes a 200 without a matching candidate prove
	// that the request was never applied. Set it only for a search that
	// sees every write at once; otherwise "none yet" is inconclusive.
	// +optional
	NoMatchMeansAbsent bool `json:"noMatchMeansAbsent,omitempty"`

	// replayWindow is how long after the first attempt the provider
	// replays the stored response of a key (Stripe: 24h). Within it a
	// Replay lookup re-sends the request; after it the outcome is escalated,
	// never re-sent.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="replayWindow must be positive"
	ReplayWindow *metav1.Duration `json:"replayWindow,omitempty"`
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

	// errorCodePointer is the JSON Pointer of the provider's short error
	// code or type in an error answer, such as "/error/code"; it is stored
	// with the status code (64 characters at most).
	// +optional
	// +kubebuilder:validation:Pattern=`^(/[^/]*)+$`
	// +kubebuilder:validation:MaxLength=256
	ErrorCodePointer string `json:"errorCodePointer,omitempty"`

	// storeErrorBody stores the first 256 bytes of an error answer's body
	// in the action's error, conditions, history and events. Off by
	// default: error bodies may echo parameters or personal data, so only
	// the status code, the error code and a SHA-256 of the body are stored.
	// +optional
	StoreErrorBody bool `json:"storeErrorBody,omitempty"`
}

// HTTPKeyPlacement says where the idempotency key is sent.
// +kubebuilder:validation:Enum=Header;BodyField
type HTTPKeyPlacement string

const (
	// KeyInHeader sends the key in a header.
	KeyInHeader HTTPKeyPlacement = "Header"
	// KeyInBodyField sends the key as a top-level field of the body.
	KeyInBodyField HTTPKeyPlacement = "BodyField"
)

// HTTPKeyFormat says how a key in a header is written.
// +kubebuilder:validation:Enum=StructuredString;Raw
type HTTPKeyFormat string

const (
	// KeyStructuredString quotes the key as a structured-field string
	// (RFC 8941), as the IETF Idempotency-Key draft specifies.
	KeyStructuredString HTTPKeyFormat = "StructuredString"
	// KeyRaw sends the key as it is, as Stripe and most providers expect.
	KeyRaw HTTPKeyFormat = "Raw"
)

// HTTPIdempotencyKey says where and how the idempotency key is sent.
// +kubebuilder:validation:XValidation:rule="(has(self.__in__) && self.__in__ == 'BodyField') == has(self.bodyField)",message="bodyField is set exactly when in is BodyField"
type HTTPIdempotencyKey struct {
	// in is where the key goes: Header or BodyField.
	// +optional
	// +kubebuilder:default=Header
	In HTTPKeyPlacement `json:"in,omitempty"`

	// header is the header's name when in is Header, such as
	// PayPal-Request-Id or X-Idempotency-Key.
	// +optional
	// +kubebuilder:default=Idempotency-Key
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9!#$%&'*+.^_|~-]+$`
	// +kubebuilder:validation:MaxLength=256
	Header string `json:"header,omitempty"`

	// format is how the key is written in the header: StructuredString
	// ("quoted") or Raw.
	// +optional
	// +kubebuilder:default=StructuredString
	Format HTTPKeyFormat `json:"format,omitempty"`

	// bodyField is the top-level field of the body that carries the key
	// when in is BodyField, such as idempotency_key (Square) or ClientToken (AWS).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	BodyField string `json:"bodyField,omitempty"`

	// maxLength is the provider's limit on the key as sent, quotes
	// included: Stripe 255, Adyen and AWS 64. A longer key is shortened to
	// its start, "~" and 32 hex digits of its SHA-256; "~" never occurs in
	// a key that was not shortened, so the two cannot collide.
	// +optional
	// +kubebuilder:default=255
	// +kubebuilder:validation:Minimum=40
	// +kubebuilder:validation:Maximum=4096
	MaxLength int32 `json:"maxLength,omitempty"`
}

// HTTPEncoding says how the parameters are sent.
// +kubebuilder:validation:Enum=JSON;Form;Query
type HTTPEncoding string

const (
	// EncodingJSON sends the parameters as a JSON body.
	EncodingJSON HTTPEncoding = "JSON"
	// EncodingForm sends them as application/x-www-form-urlencoded, nested
	// objects and arrays in bracket notation (metadata[order]=1001, expand[]=customer).
	EncodingForm HTTPEncoding = "Form"
	// EncodingQuery sends no body and the parameters as the query string,
	// in the same bracket notation, for GET and DELETE.
	EncodingQuery HTTPEncoding = "Query"
)

// ToolCredentialLabel is the label that, set to "true", opts a Secret in to
// being read by Tools (spec.http.authHeader and spec.http.tls): a Tool may
// name no other Secret, so that whoever writes Tools cannot send the
// namespace's other Secrets anywhere.
const ToolCredentialLabel = "toolledger.dev/tool-credential"

// HTTPAdapter calls an HTTP(S) endpoint once per intent, with the action's
// parameters as the body and its idempotency key where the provider takes it.
// +kubebuilder:validation:XValidation:rule="!has(self.idempotencyKey) || !has(self.idempotencyKey.__in__) || self.idempotencyKey.__in__ != 'BodyField' || !has(self.encoding) || self.encoding != 'Query'",message="a key in a body field needs a body: use encoding JSON or Form"
// +kubebuilder:validation:XValidation:rule="!has(self.tls) || (self.url.startsWith('https://') && (!has(self.lookup) || !has(self.lookup.url) || self.lookup.url.startsWith('https://')))",message="tls needs https:// in url and lookup.url"
type HTTPAdapter struct {
	// url is the endpoint that performs the operation. A placeholder {name}
	// is replaced by the escaped top-level parameter name, which must be a
	// required string or integer of parametersSchema and is not sent in the
	// body, for example "https://api.stripe.com/v1/customers/{customer}/balance_transactions".
	// +required
	// +kubebuilder:validation:Pattern=`^https?://`
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url"`

	// method is the HTTP method.
	// +optional
	// +kubebuilder:default=POST
	// +kubebuilder:validation:Enum=GET;POST;PUT;PATCH;DELETE
	Method string `json:"method,omitempty"`

	// encoding is how the parameters are sent: JSON, Form
	// (application/x-www-form-urlencoded, as Stripe takes them) or Query.
	// +optional
	// +kubebuilder:default=JSON
	Encoding HTTPEncoding `json:"encoding,omitempty"`

	// idempotencyKey says where and how the key is sent.
	// +optional
	// +kubebuilder:default={}
	IdempotencyKey HTTPIdempotencyKey `json:"idempotencyKey,omitempty"`

	// headers are static headers sent with every request.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	Headers []HTTPHeader `json:"headers,omitempty"`

	// authHeader is a header, typically Authorization, read from a Secret in
	// the Tool's namespace that carries the label
	// toolledger.dev/tool-credential=true; no other Secret is usable. It is
	// sent over https:// only, or over http:// to a host the manager's
	// --egress-plain-http names.
	// +optional
	AuthHeader *SecretHeader `json:"authHeader,omitempty"`

	// tls verifies the server with a CA bundle of the Tool's own instead of
	// the system roots, and presents a client certificate (mutual TLS);
	// both are read from Secrets labelled toolledger.dev/tool-credential=true.
	// It needs https:// in url and lookup.url.
	// +optional
	TLS *HTTPTLS `json:"tls,omitempty"`

	// timeout bounds one attempt, 5m at most. A request still unanswered
	// then has an unknown outcome, which is reconciled rather than re-sent.
	// An operation that takes longer is modelled as two tools: one that
	// starts it and returns its identifier, and one that reads its state.
	// +optional
	// +kubebuilder:default="10s"
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('5m')",message="timeout must be more than 0s and at most 5m: model a longer operation as a tool that starts it and one that reads its state"
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// lookup finds an earlier request, by its key, by a business reference
	// or by the provider's replay of the key.
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

// ToolSpec is the tool contract. Exactly one adapter member (http or
// kubernetesApply) says how the operation is performed; see AdapterName.
// +kubebuilder:validation:XValidation:rule="[has(self.http), has(self.kubernetesApply)].filter(set, set).size() == 1",message="exactly one adapter must be set (http or kubernetesApply)"
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

	// description says what the operation does and when to use it, for
	// people and for agents: the MCP gateway (toolledger-mcp) publishes it
	// as the tool's description.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Description string `json:"description,omitempty"`

	// idempotencyClass says whether and how the operation may be repeated.
	// +required
	IdempotencyClass IdempotencyClass `json:"idempotencyClass"`

	// http is the HTTP adapter that performs the operation. It is one member
	// of the adapter union: exactly one member is set.
	// +optional
	HTTP *HTTPAdapter `json:"http,omitempty"`

	// kubernetesApply is the Kubernetes apply adapter: it server-side
	// applies an object made from a template and the parameters, as a
	// ServiceAccount of the Tool's namespace. It is one member of the
	// adapter union.
	// +optional
	KubernetesApply *KubernetesApplyAdapter `json:"kubernetesApply,omitempty"`

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

	// clientKeyRequired makes the gateways refuse a call that carries no
	// idempotency key of its caller's own (in MCP, _meta's
	// toolledger.dev/key or the commerce bindings' arguments.meta key)
	// instead of deriving one from its arguments; the MCP gateway says so
	// in the tool's inputSchema. A ToolAction applied directly always has
	// one: its name.
	// +optional
	ClientKeyRequired bool `json:"clientKeyRequired,omitempty"`

	// recordRetention is how long a finished action's full record is kept
	// after completion. The record is then deleted; an action that was
	// dispatched leaves a Tombstone, which keeps its key until keyRetention.
	// Unset keeps records until keyRetention, or until someone deletes them.
	// With an archive (the manager's --archive-dsn) the record moves to the
	// archive instead, which keeps the key, and unset means the manager's
	// --archive-record-retention (5m by default).
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

	// downstreamKeyRetention is how long the downstream keeps the
	// idempotency key it is sent (Stripe: 24h), counted from the first
	// attempt. Answers state when it ends (status.downstreamKeptUntil).
	// After it, an attempt of a KeyProtected tool whose outcome is unknown
	// is never re-sent under the key, which the downstream no longer
	// deduplicates by: it is looked up where the tool has a lookup call,
	// and otherwise goes to a human. Unset trusts the downstream to keep
	// the key for good.
	// +optional
	DownstreamKeyRetention *metav1.Duration `json:"downstreamKeyRetention,omitempty"`

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

// KubernetesApplyAdapter applies one object in the Tool's namespace per
// intent, with the permissions of a ServiceAccount of that namespace.
type KubernetesApplyAdapter struct {
	// serviceAccountName is the ServiceAccount of the Tool's namespace that
	// the manager impersonates to apply the object, so that the effect has
	// the tenant's own permissions: it needs get, create and patch on the
	// object's resource. The manager may impersonate only the
	// ServiceAccounts of namespaces that bind it the ClusterRole
	// toolledger-impersonator (docs/adapters.md).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ServiceAccountName string `json:"serviceAccountName"`

	// template is the object to apply: apiVersion and kind (fixed, of a
	// namespaced kind), metadata.name and the fields this tool owns. A
	// string "{{name}}" is replaced by the top-level parameter name with its
	// JSON type (so "{{replicas}}" can be a number); "{{name}}" inside a
	// longer string is replaced by its text (a string, number or boolean).
	// metadata.namespace is always the Tool's namespace, and the object is
	// annotated with the action's toolledger.dev/idempotency-key and
	// toolledger.dev/request-digest, by which a lookup finds it.
	// +required
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	Template apiextensionsv1.JSON `json:"template"`

	// fieldManager is the server-side apply field manager; by default
	// "toolledger-" and the Tool's name. A field another manager owns is a
	// conflict, which fails the action; it is never forced.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	FieldManager string `json:"fieldManager,omitempty"`

	// timeout bounds one apply or lookup, 5m at most.
	// +optional
	// +kubebuilder:default="10s"
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('5m')",message="timeout must be more than 0s and at most 5m"
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// Names of the adapter union's members.
const (
	// AdapterHTTP names the HTTP adapter, the member spec.http.
	AdapterHTTP = "http"
	// AdapterKubernetesApply names the Kubernetes apply adapter, spec.kubernetesApply.
	AdapterKubernetesApply = "kubernetesApply"
)

// AdapterName names the adapter a tool uses: the member of the adapter union
// that is set, or "" when none is (the API server refuses such a Tool).
func AdapterName(spec *ToolSpec) string {
	switch {
	case spec.HTTP != nil:
		return AdapterHTTP
	case spec.KubernetesApply != nil:
		return AdapterKubernetesApply
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
