package sdk

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/digest"
)

// Request is one business intent. Every invocation of the same intent must
// carry the same Request: the API server records the first one under Key and
// refuses any other with a *DuplicateConflictError. It has JSON tags so that
// it can be handed to a sub-agent unchanged (see Delegate).
type Request struct {
	// Namespace is the tenant.
	Namespace string `json:"namespace"`
	// Key is the idempotency key and the ToolAction's name; derive it with
	// WorkflowKey or ArgumentsKey.
	Key string `json:"key"`
	// Tool names the Tool, in Namespace, that carries out the action, or
	// the ClusterTool when ToolKind is ClusterTool.
	Tool string `json:"tool"`
	// ToolKind is Tool (when empty) or ClusterTool, for a platform-wide
	// tool whose selector admits Namespace.
	ToolKind string `json:"toolKind,omitempty"`
	// Parameters is the JSON object sent to the tool. Each value is encoded
	// with encoding/json (json.RawMessage values are taken as they are) and
	// the object is canonicalized (RFC 8785) before it is sent, so member
	// order and number spelling do not matter: 1000, 1000.0, int64(1000) and
	// json.Number("1e3") are the same request. Integers beyond 2^53 and
	// duplicate member names are refused; send such values as strings.
	Parameters map[string]any `json:"parameters,omitempty"`
	// RequestDigest optionally proves what the caller meant: "sha256:" and
	// the hex digest computed with package digest. The action runs only if
	// the controller computes the same digest.
	RequestDigest string `json:"requestDigest,omitempty"`
	// Provenance is recorded in the spec and sent downstream unchanged. It is
	// part of the recorded request, so it must be the same on every
	// invocation of the key: derive it from the same stable identity as the
	// key, not from per-attempt values such as a fresh trace per retry.
	Provenance *v1alpha1.Provenance `json:"provenance,omitempty"`
	// Compensates optionally names the Succeeded ToolAction, in the same
	// namespace, whose effect this intent offsets.
	Compensates string `json:"compensates,omitempty"`
	// ClientKey is the key the caller sent in its own protocol, when Key
	// was derived from it with ClientKey; it is recorded in the spec as
	// sent (1 to 255 printable ASCII characters).
	ClientKey string `json:"clientKey,omitempty"`
	// RequestedBy is the user the action is recorded for, stamped in its
	// toolledger.dev/requested-by annotation, for an intermediary that
	// invokes as each of its callers (the gateway): an action another user
	// created under the name is then refused as a conflict, never answered
	// as this caller's. The identity policy refuses any value other than
	// the requesting user. Empty leaves the stamp to the policy.
	RequestedBy string `json:"requestedBy,omitempty"`
}

// Delegate returns the Request a sub-agent sends when it carries out the
// parent's intent on the parent's behalf: the parent's own Request, key and
// provenance included. Delegation must not derive a new key: the intent is
// the parent's, and a second key would let the delegate's invocation and the
// parent's own (or a retried delegation) each cause an effect. Nor may the
// delegate add itself to Provenance.Principals: provenance is part of the
// immutable request, so a changed chain is refused as a DuplicateConflict.
// Name a known delegate in the principals before the first invocation.
//
// The copy is deep for Provenance and one level deep for Parameters; nested
// parameter values are shared and must be treated as read-only. A Request
// sent to a sub-agent as JSON arrives equivalent, because parameters are
// canonicalized before they are applied.
func Delegate(parent Request) Request {
	delegated := parent
	delegated.Parameters = maps.Clone(parent.Parameters)
	delegated.Provenance = parent.Provenance.DeepCopy()
	return delegated
}

// Outcome is the ledger record of an intent, as the API server held it when
// Invoke returned.
type Outcome struct {
	Namespace string
	Key       string
	// Phase is Succeeded, Failed or Escalated once the action settled.
	// Escalated means nobody could prove whether the effect happened and a
	// human decides (a ToolResolution); it is not a failure to retry.
	// AwaitingApproval means its tool requires an approval that nobody has
	// given yet (see Invoke and WaitForApproval). Other phases (Accepted,
	// Executing, RetryScheduled, Unknown) come only with an error: the
	// caller's context ended, or the wait failed.
	Phase v1alpha1.Phase
	// Deduplicated reports that this call did not cause the effect: the key
	// was already recorded with this request, or its record was deleted and
	// its Tombstone answered with the original outcome (ErrorReason or the
	// Succeeded condition then says SettledByTombstone). After a lost answer to an
	// earlier call of your own, that call may have been the one that did.
	Deduplicated bool
	// SettledBy says what settled the action besides an attempt of its
	// own: FoundByLookup (an attempt's unknown outcome was looked up),
	// SettledByTombstone or SettledByArchive; empty otherwise.
	SettledBy string
	// CreatedAt is when the intent was first recorded.
	CreatedAt time.Time
	// ExternalRef is the downstream's identifier of the effect.
	ExternalRef string
	// Result holds the response fields the Tool allows to be stored.
	Result json.RawMessage
	// ErrorClass, ErrorReason and Message describe why the action is not
	// (yet) succeeded, from status.error.
	ErrorClass  v1alpha1.ErrorClass
	ErrorReason string
	Message     string
	// Attempts counts the dispatches so far.
	Attempts int32
	// RequestDigest is the digest the controller computed for the request;
	// an approval names it.
	RequestDigest string
	// RequestedBy is the user the API server stamped as the action's
	// creator (toolledger.dev/requested-by); empty where the identity
	// policies are not installed.
	RequestedBy string
	// KeyUncheckable reports an action held before its first dispatch
	// because no manager can check its key now (the archive that keeps the
	// ledger's keys is down): it runs once one can, and a call under the
	// key until then finds it recorded. Phase is Accepted.
	KeyUncheckable bool
	// KeptUntil is until when, at least, the ledger keeps the key of the
	// finished action: a retry under it until then gets this outcome. Zero
	// while the action runs, for one never dispatched, and when only an
	// administrator frees the key.
	KeptUntil time.Time
	// DownstreamKeptUntil is when the downstream forgets the key it was
	// sent, where the tool declares its downstreamKeyRetention; zero
	// otherwise.
	DownstreamKeptUntil time.Time
	// Approval is the decision applied to the action, for a tool that
	// requires approval; nil until one is.
	Approval *v1alpha1.ApprovalRecord
}

// AwaitingApproval reports whether the action waits for a human's approval.
func (o *Outcome) AwaitingApproval() bool {
	return o.Phase == v1alpha1.PhaseAwaitingApproval
}

// OutcomeOf is the outcome an action's record holds, as Invoke would
// report it to a caller that did not record it.
func OutcomeOf(action *v1alpha1.ToolAction) *Outcome {
	return newOutcome(action, false)
}

func newOutcome(action *v1alpha1.ToolAction, deduplicated bool) *Outcome {
	o := &Outcome{
		Namespace:     action.Namespace,
		Key:           action.Name,
		Phase:         action.Status.Phase,
		SettledBy:     action.Status.SettledBy(),
		CreatedAt:     action.CreationTimestamp.Time,
		ExternalRef:   action.Status.ExternalRef,
		Attempts:      action.Status.Attempts,
		RequestDigest: action.Status.RequestDigest,
		RequestedBy:   action.Annotations[v1alpha1.RequestedByAnnotation],
		Approval:      action.Status.Approval.DeepCopy(),
	}
	o.Deduplicated = deduplicated || action.Status.SettledByEarlierRecord()
	o.KeyUncheckable = action.Status.KeyUncheckable()
	if t := action.Status.KeptUntil; t != nil {
		o.KeptUntil = t.Time
	}
	if t := action.Status.DownstreamKeptUntil; t != nil {
		o.DownstreamKeptUntil = t.Time
	}
	if action.Status.Result != nil {
		// A copy: invocations of one key share the observed action.
		o.Result = bytes.Clone(action.Status.Result.Raw)
	}
	if e := action.Status.Error; e != nil {
		o.ErrorClass, o.ErrorReason, o.Message = e.Class, e.Reason, e.Message
	}
	return o
}

// applyConfiguration is the server-side apply body: only what the caller
// owns, so that every invocation of an intent applies the same bytes.
type applyConfiguration struct {
	APIVersion string                  `json:"apiVersion"`
	Kind       string                  `json:"kind"`
	Metadata   applyMetadata           `json:"metadata"`
	Spec       v1alpha1.ToolActionSpec `json:"spec"`
}

// applyMetadata carries the controller's finalizer from the start: the
// action is then protected while in flight without the controller's own
// metadata write, so an invocation costs three writes (create, claim,
// outcome) instead of four.
type applyMetadata struct {
	Name       string   `json:"name"`
	Namespace  string   `json:"namespace"`
	Finalizers []string `json:"finalizers"`
	// Annotations carry the invocation's traceparent, when it has one.
	Annotations map[string]string `json:"annotations,omitempty"`
}

// applyBody validates req and encodes it deterministically. traceparent is
// the invoking span's, "" without one: it is metadata, so an invocation
// from another span applies the same intent.
func applyBody(req Request, traceparent string) ([]byte, error) {
	if err := req.validate(); err != nil {
		return nil, err
	}
	parameters, err := encodeParameters(req.Parameters)
	if err != nil {
		return nil, fmt.Errorf("%w: toolaction %s/%s: %w", ErrInvalidRequest, req.Namespace, req.Key, err)
	}
	body := applyConfiguration{
		APIVersion: v1alpha1.GroupVersion.String(),
		Kind:       "ToolAction",
		Metadata:   applyMetadata{Name: req.Key, Namespace: req.Namespace, Finalizers: []string{v1alpha1.Finalizer}},
		Spec: v1alpha1.ToolActionSpec{
			ToolRef:       v1alpha1.ToolReference{Kind: req.ToolKind, Name: req.Tool},
			Parameters:    parameters,
			RequestDigest: req.RequestDigest,
			Provenance:    req.Provenance,
			Compensates:   req.Compensates,
			ClientKey:     req.ClientKey,
		},
	}
	if traceparent != "" || req.RequestedBy != "" {
		body.Metadata.Annotations = map[string]string{}
	}
	if traceparent != "" {
		body.Metadata.Annotations[v1alpha1.TraceparentAnnotation] = traceparent
	}
	if req.RequestedBy != "" {
		body.Metadata.Annotations[v1alpha1.RequestedByAnnotation] = req.RequestedBy
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(body); err != nil {
		return nil, fmt.Errorf("cannot encode toolaction %s/%s: %w", req.Namespace, req.Key, err)
	}
	return buf.Bytes(), nil
}

func (r Request) validate() error {
	var problems []string
	if r.Namespace == "" {
		problems = append(problems, "namespace is empty")
	}
	if errs := validation.IsDNS1123Subdomain(r.Key); len(errs) > 0 {
		problems = append(problems, fmt.Sprintf("key %q is not a valid object name: %s", r.Key, strings.Join(errs, "; ")))
	}
	if r.Tool == "" {
		problems = append(problems, "tool is empty")
	}
	if r.ClientKey != "" {
		if err := ValidClientKey(r.ClientKey); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if r.ToolKind != "" && r.ToolKind != v1alpha1.KindTool && r.ToolKind != v1alpha1.KindClusterTool {
		problems = append(problems, fmt.Sprintf("tool kind %q is neither %s nor %s", r.ToolKind, v1alpha1.KindTool, v1alpha1.KindClusterTool))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidRequest, strings.Join(problems, "; "))
	}
	return nil
}

// encodeParameters turns the parameters into the canonical JSON of each
// member. The same values then always apply as the same bytes, whoever sends
// them and however they were spelled or typed, so a duplicate is a no-op
// for the API server, and values the controller would refuse as
// InvalidParameters are refused before anything is recorded.
func encodeParameters(parameters map[string]any) (map[string]apiextensionsv1.JSON, error) {
	if len(parameters) == 0 {
		return nil, nil
	}
	encoded, err := json.Marshal(parameters)
	if err != nil {
		return nil, fmt.Errorf("cannot encode parameters: %w", err)
	}
	canonical, err := digest.Canonicalize(encoded)
	if err != nil {
		return nil, fmt.Errorf("cannot canonicalize parameters: %w", err)
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(canonical, &members); err != nil {
		return nil, fmt.Errorf("cannot split canonical parameters into members: %w", err)
	}
	out := make(map[string]apiextensionsv1.JSON, len(members))
	for name, value := range members {
		out[name] = apiextensionsv1.JSON{Raw: value}
	}
	return out, nil
}
