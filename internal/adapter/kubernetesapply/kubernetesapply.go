// Package kubernetesapply is the kubernetesApply adapter: it server-side
// applies one object, made from the Tool's template and the action's
// parameters, in the Tool's namespace and as a ServiceAccount of that
// namespace, which the manager impersonates. The effect thus carries the
// tenant's own permissions, never the manager's. The object is annotated
// with the action's key and digest, which is how a lookup finds it.
package kubernetesapply

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/validate/content"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	authenticationclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/adapter"
)

// Reasons of a Tool's Ready condition that the adapter decides, beside the
// template's (template.go).
const (
	ReasonUnknownKind             = "UnknownKind"
	ReasonClusterScoped           = "ClusterScoped"
	ReasonImpersonationNotAllowed = "ImpersonationNotAllowed"
)

// ImpersonatorRole is the ClusterRole, installed by config/rbac and by the
// Helm chart (as <release>-impersonator), that a namespace binds to the
// manager to let it impersonate the namespace's ServiceAccounts.
const ImpersonatorRole = "toolledger-impersonator"

const (
	defaultTimeout = 10 * time.Second
	// maxMessageLength bounds what is kept of the API server's message,
	// such as the list of a conflict's fields.
	maxMessageLength = 1024
)

// Connector is the kubernetesApply adapter. Every connection shares one
// HTTP client and one RESTMapper; a connection only wraps the transport to
// impersonate its Tool's ServiceAccount.
type Connector struct {
	// config is the manager's, for clients of the dynamic kind.
	config *rest.Config
	// httpClient authenticates as the manager and impersonates nobody.
	httpClient *http.Client
	mapper     meta.RESTMapper
	reviews    authorizationclient.SelfSubjectAccessReviewInterface
	identity   authenticationclient.SelfSubjectReviewInterface
}

var _ adapter.Adapter = (*Connector)(nil)

// New builds the adapter on the manager's configuration. A configuration
// that impersonates (a local runner acting as the manager's
// ServiceAccount) is used with its own credentials: impersonation does not
// nest, so those credentials impersonate the Tools' ServiceAccounts.
func New(cfg *rest.Config) (*Connector, error) {
	manager := rest.CopyConfig(cfg)
	manager.Impersonate = rest.ImpersonationConfig{}
	config := dynamic.ConfigFor(manager)
	// Paths are absolute and the Tool's spec.limits and the dispatcher pace
	// the calls: no API path and no client-side rate limit.
	config.GroupVersion, config.APIPath, config.QPS = nil, "", -1
	httpClient, err := rest.HTTPClientFor(config)
	if err != nil {
		return nil, fmt.Errorf("cannot build the kubernetesApply HTTP client: %w", err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(config, httpClient)
	if err != nil {
		return nil, fmt.Errorf("cannot build the kubernetesApply RESTMapper: %w", err)
	}
	authorization, err := authorizationclient.NewForConfigAndClient(manager, httpClient)
	if err != nil {
		return nil, err
	}
	authentication, err := authenticationclient.NewForConfigAndClient(manager, httpClient)
	if err != nil {
		return nil, err
	}
	return &Connector{
		config:     config,
		httpClient: httpClient,
		mapper:     mapper,
		reviews:    authorization.SelfSubjectAccessReviews(),
		identity:   authentication.SelfSubjectReviews(),
	}, nil
}

// Name is the adapter union's member, spec.kubernetesApply.
func (c *Connector) Name() string { return v1alpha1.AdapterKubernetesApply }

// Capabilities offers a lookup, since the object's annotations prove
// whether an attempt applied, and keys of any length: annotation values
// are unbounded.
func (c *Connector) Capabilities(tool *v1alpha1.Tool) adapter.Capabilities {
	return adapter.Capabilities{Lookup: true, AttemptTimeout: timeout(tool.Spec.KubernetesApply)}
}

// Validate checks the template, that its kind is served and namespaced,
// and that the manager may impersonate the ServiceAccount.
func (c *Connector) Validate(ctx context.Context, tool *v1alpha1.Tool) error {
	spec := tool.Spec.KubernetesApply
	t, err := parseTemplate(spec.Template.Raw, tool.Namespace, tool.Spec.ConsequentialFields)
	if err != nil {
		return err
	}
	if _, err := c.mapping(t); err != nil {
		return err
	}
	review, err := c.reviews.Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: tool.Namespace, Verb: "impersonate", Resource: "serviceaccounts", Name: spec.ServiceAccountName,
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("cannot review whether the manager may impersonate %s/%s: %w", tool.Namespace, spec.ServiceAccountName, err)
	}
	if !review.Status.Allowed {
		return &adapter.ConfigError{Reason: ReasonImpersonationNotAllowed, Message: fmt.Sprintf(
			"the manager may not impersonate the ServiceAccount %s/%s; a namespace admin lets it with a RoleBinding of the ClusterRole %s (the Helm chart's <release>-impersonator): kubectl create rolebinding %s --namespace %s --clusterrole %s %s",
			tool.Namespace, spec.ServiceAccountName, ImpersonatorRole, ImpersonatorRole, tool.Namespace, ImpersonatorRole, c.managerSubject(ctx))}
	}
	return nil
}

// managerSubject is the kubectl flag that names the manager's identity in
// a RoleBinding.
func (c *Connector) managerSubject(ctx context.Context) string {
	review, err := c.identity.Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "--serviceaccount <manager namespace>:<manager ServiceAccount>"
	}
	user := review.Status.UserInfo.Username
	if account, ok := strings.CutPrefix(user, "system:serviceaccount:"); ok {
		return "--serviceaccount " + account
	}
	return "--user " + user
}

// mapping is the template kind's resource; it must be namespaced, so that
// the effect stays in the tenant's namespace.
func (c *Connector) mapping(t *template) (*meta.RESTMapping, error) {
	gvk := schema.FromAPIVersionAndKind(t.apiVersion, t.kind)
	mapping, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		return nil, &adapter.ConfigError{Reason: ReasonUnknownKind, Message: fmt.Sprintf("the API server serves no kind %s in %s", t.kind, t.apiVersion)}
	}
	if err != nil {
		return nil, fmt.Errorf("cannot map %s %s to its resource: %w", t.apiVersion, t.kind, err)
	}
	if mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		return nil, &adapter.ConfigError{Reason: ReasonClusterScoped, Message: fmt.Sprintf(
			"%s %s is cluster-scoped: kubernetesApply applies only namespaced objects, in the Tool's namespace", t.apiVersion, t.kind)}
	}
	return mapping, nil
}

func timeout(spec *v1alpha1.KubernetesApplyAdapter) time.Duration {
	return adapter.TimeoutOr(spec.Timeout, defaultTimeout)
}

// Connect builds the Tool's executor, which acts as its ServiceAccount. A
// template Validate refuses cannot connect, so the action waits for the
// Tool to be fixed rather than fail.
func (c *Connector) Connect(_ context.Context, tool *v1alpha1.Tool) (adapter.Connection, error) {
	spec := tool.Spec.KubernetesApply
	t, err := parseTemplate(spec.Template.Raw, tool.Namespace, tool.Spec.ConsequentialFields)
	if err != nil {
		return adapter.Connection{}, err
	}
	mapping, err := c.mapping(t)
	if err != nil {
		return adapter.Connection{}, err
	}
	user := "system:serviceaccount:" + tool.Namespace + ":" + spec.ServiceAccountName
	impersonating := &http.Client{
		Transport: transport.NewImpersonatingRoundTripper(transport.ImpersonationConfig{UserName: user}, c.httpClient.Transport),
		Timeout:   c.httpClient.Timeout,
	}
	restClient, err := rest.UnversionedRESTClientForConfigAndClient(c.config, impersonating)
	if err != nil {
		return adapter.Connection{}, fmt.Errorf("cannot build the client of %s: %w", user, err)
	}
	fieldManager := spec.FieldManager
	if fieldManager == "" {
		fieldManager = "toolledger-" + tool.Name
	}
	e := &executor{
		objects:       dynamic.New(singleShot{restClient}).Resource(mapping.Resource).Namespace(tool.Namespace),
		resource:      mapping.Resource,
		namespace:     tool.Namespace,
		template:      t,
		fieldManager:  fieldManager,
		timeout:       timeout(spec),
		absenceProves: absenceProves(tool.Spec.IdempotencyClass),
	}
	return adapter.Connection{Executor: e, Capabilities: c.Capabilities(tool)}, nil
}

// singleShot sends each request once. client-go otherwise sends a request
// again, up to ten times, when it is answered 429 or 5xx with Retry-After,
// and one Execute must be one attempt.
type singleShot struct{ rest.Interface }

func (s singleShot) Patch(pt types.PatchType) *rest.Request {
	return s.Interface.Patch(pt).MaxRetries(0)
}
func (s singleShot) Get() *rest.Request { return s.Interface.Get().MaxRetries(0) }

type executor struct {
	objects      dynamic.ResourceInterface
	resource     schema.GroupVersionResource
	namespace    string
	template     *template
	fieldManager string
	timeout      time.Duration
	// absenceProves: an object absent, or last applied under another key
	// or none, proves that no attempt applied (see absenceProves).
	absenceProves bool
}

// absenceProves reports whether the object's absence may answer a lookup
// with "never applied" for a tool of class. Objects vanish because they
// applied: a Job with ttlSecondsAfterFinished, garbage collection, another
// controller replacing the object or its annotations. Only where applying
// again cannot cause a second effect (desired state, or no effect at all)
// may absence settle the outcome; otherwise it proves nothing, and the
// lookup is inconclusive until the object shows the key or the tool's
// unknownOutcomeDeadline hands the action to a human.
func absenceProves(class v1alpha1.IdempotencyClass) bool {
	return class == v1alpha1.NaturallyIdempotent || class == v1alpha1.ReadOnly
}

// Execute applies the object once, never forcing ownership: a field that
// another manager owns fails the action with ApplyConflict.
func (e *executor) Execute(ctx context.Context, req adapter.Request) (adapter.Outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	obj, err := e.object(req)
	if err != nil {
		return adapter.Outcome{}, err
	}
	ctx, written := adapter.TraceWritten(ctx)
	applied, err := e.objects.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: e.fieldManager})
	if err != nil {
		return adapter.Outcome{}, classify(err, written(), ctx.Err())
	}
	return e.outcome(applied), nil
}

// Lookup reads the object from the API server, as the ServiceAccount. The
// API server is strongly consistent, so an object that carries the key and
// the digest proves that an attempt applied. An object that is absent, or
// carries another key or none, proves that none did only for the classes
// absenceProves admits; for the others it is inconclusive.
func (e *executor) Lookup(ctx context.Context, req adapter.Request) (adapter.Outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	obj, err := e.object(req)
	if err != nil {
		return adapter.Outcome{}, err
	}
	ref := e.externalRef(obj.GetName())
	current, err := e.objects.Get(ctx, obj.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return adapter.Outcome{}, e.absent(ref + " does not exist")
	}
	if err != nil {
		return adapter.Outcome{}, fmt.Errorf("cannot read %s: %w", ref, err)
	}
	annotations := current.GetAnnotations()
	switch key, ok := annotations[v1alpha1.IdempotencyKeyAnnotation]; {
	case !ok:
		return adapter.Outcome{}, e.absent(ref + " carries no idempotency key")
	case key != req.IdempotencyKey:
		return adapter.Outcome{}, e.absent(fmt.Sprintf("%s was last applied under the key %q", ref, key))
	}
	if digest := annotations[v1alpha1.RequestDigestAnnotation]; digest != req.RequestDigest {
		return adapter.Outcome{}, fmt.Errorf("%s carries the key but the request digest %q, not %q: it cannot be told whether this request applied", ref, digest, req.RequestDigest)
	}
	return e.outcome(current), nil
}

// absent is what an object without this attempt's key means: proof that
// none applied where absenceProves, else an inconclusive answer.
func (e *executor) absent(finding string) error {
	if e.absenceProves {
		return fmt.Errorf("%s: %w", finding, adapter.ErrNotFound)
	}
	return fmt.Errorf("%s, which proves nothing for a tool of this class: the object may have been applied and removed or changed since (a Job's ttlSecondsAfterFinished, garbage collection, another controller); it is not applied again unless a lookup finds the key", finding)
}

// object is the template filled with the request's parameters, in the
// Tool's namespace and annotated with the request's key and digest.
func (e *executor) object(req adapter.Request) (*unstructured.Unstructured, error) {
	filled, err := e.template.fill(req.Parameters)
	if err != nil {
		return nil, err
	}
	obj := &unstructured.Unstructured{Object: filled}
	name, ok, _ := unstructured.NestedString(filled, "metadata", "name")
	if !ok || name == "" {
		return nil, invalidParameter("metadata.name, filled, is not a non-empty string")
	}
	if problems := content.IsPathSegmentName(name); len(problems) > 0 {
		return nil, invalidParameter("metadata.name %q: %s", name, strings.Join(problems, "; "))
	}
	annotations, _, err := unstructured.NestedStringMap(filled, "metadata", "annotations")
	if err != nil {
		return nil, invalidParameter("metadata.annotations, filled: %v", err)
	}
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[v1alpha1.IdempotencyKeyAnnotation] = req.IdempotencyKey
	annotations[v1alpha1.RequestDigestAnnotation] = req.RequestDigest
	obj.SetAnnotations(annotations)
	obj.SetNamespace(e.namespace)
	return obj, nil
}

// externalRef names the object as "<resource>.<group>/<namespace>/<name>",
// or "<resource>/<namespace>/<name>" in the core group.
func (e *executor) externalRef(name string) string {
	resource := e.resource.Resource
	if e.resource.Group != "" {
		resource += "." + e.resource.Group
	}
	return resource + "/" + e.namespace + "/" + name
}

// outcome names the object and records its uid and resourceVersion.
func (e *executor) outcome(obj *unstructured.Unstructured) adapter.Outcome {
	result := fmt.Sprintf(`{"uid":%q,"resourceVersion":%q}`, obj.GetUID(), obj.GetResourceVersion())
	return adapter.Outcome{ExternalRef: e.externalRef(obj.GetName()), Result: []byte(result)}
}

// classify maps the API server's answer to an apply:
//
//	transport error, request not sent    retryable
//	transport error after it was sent    ambiguous (Timeout, ConnectionLost)
//	403                                  permanent, Denied
//	409 Conflict (a field manager's)     permanent, InvalidInput, ApplyConflict
//	409 AlreadyExists (a racing create)  retryable: the next apply updates it
//	401                                  retryable: the manager's credentials, not the request
//	429                                  retryable, after the server's delay
//	other 4xx (400, 404, 422, ...)       permanent, InvalidInput
//	5xx                                  ambiguous (may have applied before failing)
func classify(err error, written bool, ctxErr error) error {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return adapter.TransportError(err, written, ctxErr)
	}
	code := int(status.Status().Code)
	reason := string(status.Status().Reason)
	if reason == "" || reason == string(metav1.StatusReasonUnknown) {
		reason = "HTTP" + strconv.Itoa(code)
	}
	bounded := errors.New(truncate(err.Error(), maxMessageLength))
	switch {
	case apierrors.IsForbidden(err):
		return &adapter.PermanentError{Kind: adapter.Denied, Reason: reason, Err: bounded}
	case apierrors.IsConflict(err):
		return &adapter.PermanentError{Kind: adapter.InvalidInput, Reason: "ApplyConflict", Err: bounded}
	case apierrors.IsAlreadyExists(err), apierrors.IsUnauthorized(err):
		return &adapter.RetryableError{Reason: reason, Err: bounded}
	case apierrors.IsTooManyRequests(err):
		delay, _ := apierrors.SuggestsClientDelay(err)
		return &adapter.RetryableError{Reason: reason, RetryAfter: time.Duration(delay) * time.Second, Err: bounded}
	case code >= 400 && code < 500:
		return &adapter.PermanentError{Kind: adapter.InvalidInput, Reason: reason, Err: bounded}
	default:
		return &adapter.AmbiguousError{Reason: reason, Err: bounded}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
