// Package ledgerclient is the front ends' data layer: the kubectl plugin
// (kubectlplugin) and the web console (webconsole) read the ledger through
// it (ToolActions, the queue, approvals, resolutions, Tombstones and when
// their keys are freed, and each action's tool, found as the controllers
// find it) and record ToolApprovals and ToolResolutions through it, with the
// checks every front end makes first. It never writes a ToolAction.
package ledgerclient

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/pager"
	"github.com/toolledger/toolledger/pkg/sdk"
	"github.com/toolledger/toolledger/pkg/toolref"
)

const (
	resourceActions      = "toolactions"
	resourceResolutions  = "toolresolutions"
	resourceApprovals    = "toolapprovals"
	resourceTombstones   = "tombstones"
	resourceTools        = "tools"
	resourceClusterTools = "clustertools"

	// listPageSize bounds each list response, so that a long queue is read
	// in pages rather than in one response of unbounded size.
	listPageSize = 250
)

// Ledger is the front ends' client for the toolledger API, shared by the
// kubectl plugin and the web console. It speaks REST to the API server
// without discovery: the front ends use a few resources of one known group,
// so every command makes only the requests it needs, and its errors are
// about those requests.
type Ledger struct {
	rest rest.Interface
	// archive reads records that left etcd (archived.go).
	archive rest.Interface
}

// NewLedger returns a Ledger of cfg, which names itself to the API server
// as userAgent.
func NewLedger(cfg *rest.Config, userAgent string) (*Ledger, error) {
	cfg = rest.CopyConfig(cfg)
	rest.AddUserAgent(cfg, userAgent)
	client, err := sdk.NewRESTClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("cannot build a client for %s: %w", v1alpha1.GroupVersion, err)
	}
	archive, err := newArchiveClient(cfg)
	if err != nil {
		return nil, err
	}
	return &Ledger{rest: client, archive: archive}, nil
}

// GetAction reads one ToolAction; a missing one is reported in plain words.
func (l *Ledger) GetAction(ctx context.Context, namespace, name string) (*v1alpha1.ToolAction, error) {
	return getObject[v1alpha1.ToolAction](ctx, l, resourceActions, "ToolAction", namespace, name)
}

// FindAction reads one ToolAction; nil when there is none.
func (l *Ledger) FindAction(ctx context.Context, namespace, name string) (*v1alpha1.ToolAction, error) {
	return findObject[v1alpha1.ToolAction](ctx, l, resourceActions, "ToolAction", namespace, name)
}

// FindTombstone reads the Tombstone of a key; nil when there is none.
func (l *Ledger) FindTombstone(ctx context.Context, namespace, name string) (*v1alpha1.Tombstone, error) {
	return findObject[v1alpha1.Tombstone](ctx, l, resourceTombstones, "Tombstone", namespace, name)
}

// findToolSpec reads the spec of the tool that ref names for an action in
// namespace, as the controllers find it (toolref.Find): nil when namespace
// has no such tool, because it does not exist or is a ClusterTool that does
// not admit namespace.
func (l *Ledger) findToolSpec(ctx context.Context, namespace string, ref v1alpha1.ToolReference) (*v1alpha1.ToolSpec, error) {
	tool, err := toolref.Find(ctx, ledgerTools{l}, namespace, ref)
	var notFound *toolref.NotFoundError
	var notAdmitted *toolref.NotAdmittedError
	switch {
	case errors.As(err, &notFound), errors.As(err, &notAdmitted):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return &tool.Spec, nil
}

// namedToolSpec reads the spec of the Tool or ClusterTool that ref names,
// whatever namespaces a ClusterTool admits: the manager's retention sweep
// frees a tombstone's key by the keyRetention of the tool its record names.
// nil when the tool does not exist.
func (l *Ledger) namedToolSpec(ctx context.Context, namespace string, ref v1alpha1.ToolReference) (*v1alpha1.ToolSpec, error) {
	tools := ledgerTools{l}
	if ref.KindOrDefault() == v1alpha1.KindClusterTool {
		tool, err := tools.ClusterTool(ctx, ref.Name)
		if tool == nil {
			return nil, err
		}
		return &tool.Spec.ToolSpec, nil
	}
	tool, err := tools.Tool(ctx, namespace, ref.Name)
	if tool == nil {
		return nil, err
	}
	return &tool.Spec, nil
}

// ledgerTools is the Ledger as toolref.Find reads it.
type ledgerTools struct{ l *Ledger }

func (s ledgerTools) Tool(ctx context.Context, namespace, name string) (*v1alpha1.Tool, error) {
	return findObject[v1alpha1.Tool](ctx, s.l, resourceTools, v1alpha1.KindTool, namespace, name)
}

func (s ledgerTools) ClusterTool(ctx context.Context, name string) (*v1alpha1.ClusterTool, error) {
	return findObject[v1alpha1.ClusterTool](ctx, s.l, resourceClusterTools, v1alpha1.KindClusterTool, "", name)
}

func (s ledgerTools) NamespaceLabels(ctx context.Context, namespace string) (map[string]string, error) {
	labels, err := toolref.NamespaceLabelsOver(ctx, s.l.rest, namespace)
	if err != nil {
		return nil, describeGetError(err, "Namespace", "", namespace)
	}
	return labels, nil
}

// ListInPhases lists the ToolActions of namespace ("" for all) in each of
// phases, one list a phase, through the field selector status.phase.
// Listed in lifecycle order, an action advancing while the lists are read
// (Unknown to Escalated) is seen again in its newer phase rather than
// missed, and kept as last seen (lastSightings).
func (l *Ledger) ListInPhases(ctx context.Context, namespace string, phases []v1alpha1.Phase) ([]v1alpha1.ToolAction, error) {
	var actions []v1alpha1.ToolAction
	for _, phase := range phases {
		listed, err := l.ListActions(ctx, namespace, fields.OneTermEqualSelector("status.phase", string(phase)).String())
		if err != nil {
			return nil, err
		}
		actions = append(actions, listed...)
	}
	return lastSightings(actions), nil
}

// lastSightings keeps each action listed more than once (it changed phase
// between two lists) once, as last listed, where it was first listed.
func lastSightings(actions []v1alpha1.ToolAction) []v1alpha1.ToolAction {
	index := map[types.NamespacedName]int{}
	var out []v1alpha1.ToolAction
	for _, a := range actions {
		key := types.NamespacedName{Namespace: a.Namespace, Name: a.Name}
		if at, seen := index[key]; seen {
			out[at] = a
			continue
		}
		index[key] = len(out)
		out = append(out, a)
	}
	return out
}

// ListActions reads the ToolActions of a namespace ("" for all) that match
// the field selector.
func (l *Ledger) ListActions(ctx context.Context, namespace, fieldSelector string) ([]v1alpha1.ToolAction, error) {
	items, err := listAll(ctx, l, resourceActions, namespace, metav1.ListOptions{FieldSelector: fieldSelector},
		func(page *v1alpha1.ToolActionList) []v1alpha1.ToolAction { return page.Items })
	if err != nil {
		return nil, fmt.Errorf("cannot list ToolActions (%s) in %s: %w", fieldSelector, Scope(namespace), err)
	}
	return items, nil
}

// ListTombstones reads the Tombstones of a namespace ("" for all) that match
// the label selector.
func (l *Ledger) ListTombstones(ctx context.Context, namespace, labelSelector string) ([]v1alpha1.Tombstone, error) {
	items, err := listAll(ctx, l, resourceTombstones, namespace, metav1.ListOptions{LabelSelector: labelSelector},
		func(page *v1alpha1.TombstoneList) []v1alpha1.Tombstone { return page.Items })
	if err != nil {
		return nil, fmt.Errorf("cannot list Tombstones in %s: %w", Scope(namespace), err)
	}
	return items, nil
}

// listToolRetentions reads the keyRetention of every Tool of a namespace
// ("" for all), by namespace and name.
func (l *Ledger) listToolRetentions(ctx context.Context, namespace string) (map[ToolKey]*metav1.Duration, error) {
	retentions := map[ToolKey]*metav1.Duration{}
	err := listPages(ctx, l, resourceTools, namespace, metav1.ListOptions{}, func(page *v1alpha1.ToolList) error {
		for i := range page.Items {
			t := &page.Items[i]
			retentions[ToolKey{Kind: v1alpha1.KindTool, Namespace: t.Namespace, Name: t.Name}] = t.Spec.KeyRetention
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cannot list Tools in %s: %w", Scope(namespace), err)
	}
	return retentions, nil
}

// listClusterToolRetentions reads the keyRetention of every ClusterTool.
func (l *Ledger) listClusterToolRetentions(ctx context.Context) (map[ToolKey]*metav1.Duration, error) {
	retentions := map[ToolKey]*metav1.Duration{}
	err := listPages(ctx, l, resourceClusterTools, "", metav1.ListOptions{}, func(page *v1alpha1.ClusterToolList) error {
		for i := range page.Items {
			t := &page.Items[i]
			retentions[ToolKey{Kind: v1alpha1.KindClusterTool, Name: t.Name}] = t.Spec.KeyRetention
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cannot list ClusterTools: %w", err)
	}
	return retentions, nil
}

// listPages reads a resource of a namespace ("" for all, and for a
// cluster-scoped resource) page by page, so that no response is of
// unbounded size, and hands each page to each, stopping at its first error.
func listPages[L any, PL interface {
	*L
	runtime.Object
	GetContinue() string
}](ctx context.Context, l *Ledger, resource, namespace string, opts metav1.ListOptions, each func(PL) error) error {
	opts.Limit = listPageSize
	return pager.Walk(func(cont string) (string, error) {
		opts.Continue = cont
		page := PL(new(L))
		if err := l.collection(resource, namespace, &opts).Do(ctx).Into(page); err != nil {
			return "", err
		}
		return page.GetContinue(), each(page)
	})
}

// listAll reads a resource of a namespace as listPages does, and returns
// the items of every page.
func listAll[T, L any, PL interface {
	*L
	runtime.Object
	GetContinue() string
}](ctx context.Context, l *Ledger, resource, namespace string, opts metav1.ListOptions, items func(PL) []T) ([]T, error) {
	var all []T
	err := listPages(ctx, l, resource, namespace, opts, func(page PL) error {
		all = append(all, items(page)...)
		return nil
	})
	return all, err
}

// collection is a list or watch request of a resource in a namespace ("" for
// all, and for a cluster-scoped resource), which client-go refuses to be set
// empty.
func (l *Ledger) collection(resource, namespace string, opts *metav1.ListOptions) *rest.Request {
	req := l.rest.Get().Resource(resource).VersionedParams(opts, metav1.ParameterCodec)
	if namespace != "" {
		req = req.Namespace(namespace)
	}
	return req
}

// GetResolution reads one ToolResolution.
func (l *Ledger) GetResolution(ctx context.Context, namespace, name string) (*v1alpha1.ToolResolution, error) {
	return getObject[v1alpha1.ToolResolution](ctx, l, resourceResolutions, "ToolResolution", namespace, name)
}

// getObject reads the object of a resource into a new T, which the kind
// names in errors.
func getObject[T any, PT interface {
	*T
	runtime.Object
}](ctx context.Context, l *Ledger, resource, kind, namespace, name string) (PT, error) {
	object := PT(new(T))
	if err := l.get(resource, namespace, name).Do(ctx).Into(object); err != nil {
		return nil, describeGetError(err, kind, namespace, name)
	}
	return object, nil
}

// get is the request for one object; a cluster-scoped one has no namespace,
// which client-go refuses to be set empty.
func (l *Ledger) get(resource, namespace, name string) *rest.Request {
	req := l.rest.Get().Resource(resource).Name(name)
	if namespace != "" {
		req = req.Namespace(namespace)
	}
	return req
}

// findObject is getObject for an object whose absence is an answer: it
// returns nil, and no error, when the object does not exist.
func findObject[T any, PT interface {
	*T
	runtime.Object
}](ctx context.Context, l *Ledger, resource, kind, namespace, name string) (PT, error) {
	object := PT(new(T))
	err := l.get(resource, namespace, name).Do(ctx).Into(object)
	switch {
	case err == nil:
		return object, nil
	case isMissing(err):
		return nil, nil
	default:
		return nil, describeGetError(err, kind, namespace, name)
	}
}

// GetApproval reads one ToolApproval.
func (l *Ledger) GetApproval(ctx context.Context, namespace, name string) (*v1alpha1.ToolApproval, error) {
	return getObject[v1alpha1.ToolApproval](ctx, l, resourceApprovals, "ToolApproval", namespace, name)
}

func (l *Ledger) createResolution(ctx context.Context, resolution *v1alpha1.ToolResolution) (*v1alpha1.ToolResolution, error) {
	return createRecord(ctx, l, resourceResolutions, "ToolResolution", resolution.Spec.ActionName, resolution)
}

func (l *Ledger) createApproval(ctx context.Context, approval *v1alpha1.ToolApproval) (*v1alpha1.ToolApproval, error) {
	return createRecord(ctx, l, resourceApprovals, "ToolApproval", approval.Spec.ActionName, approval)
}

// createRecord creates record, a record of kind about the ToolAction
// actionName, and returns it as the API server stored it.
func createRecord[T any, PT interface {
	*T
	runtime.Object
	GetNamespace() string
}](ctx context.Context, l *Ledger, resource, kind, actionName string, record PT) (PT, error) {
	created := PT(new(T))
	err := l.rest.Post().Namespace(record.GetNamespace()).Resource(resource).Body(record).Do(ctx).Into(created)
	if err != nil {
		return nil, fmt.Errorf("cannot create a %s for ToolAction %q in namespace %q: %w", kind, actionName, record.GetNamespace(), err)
	}
	return created, nil
}

// describeGetError tells a missing object apart from a server that does not
// serve the resource at all: client-go reports both as NotFound, but only the
// latter comes from a response that is not an API status. A cluster-scoped
// object (namespace "") is named without a namespace.
func describeGetError(err error, kind, namespace, name string) error {
	in := ""
	if namespace != "" {
		in = fmt.Sprintf(" in namespace %q", namespace)
	}
	if apierrors.IsNotFound(err) {
		if !isMissing(err) {
			return fmt.Errorf("the server does not serve %ss (%s); is toolledger installed in this cluster? %w", kind, v1alpha1.GroupVersion, err)
		}
		return fmt.Errorf("%s %q not found%s", kind, name, in)
	}
	return fmt.Errorf("cannot get %s %q%s: %w", kind, name, in, err)
}

// isMissing reports whether err says that the object does not exist, as
// opposed to the server not serving its resource (see describeGetError).
func isMissing(err error) bool {
	return apierrors.IsNotFound(err) && !apierrors.HasStatusCause(err, metav1.CauseTypeUnexpectedServerResponse)
}

// Scope names where a list was read: a namespace, or "" for all.
func Scope(namespace string) string {
	if namespace == "" {
		return "all namespaces"
	}
	return fmt.Sprintf("namespace %q", namespace)
}
