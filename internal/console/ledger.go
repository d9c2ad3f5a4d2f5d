package console

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/sdk"
)

const (
	resourceActions     = "toolactions"
	resourceResolutions = "toolresolutions"

	// listPageSize bounds each list response, so that a long queue is read
	// in pages rather than in one response of unbounded size.
	listPageSize = 250
)

// ledger is the console's client for the toolledger API. It speaks REST to
// the API server without discovery: the console uses two resources of one
// known group, so every command makes only the requests it needs, and its
// errors are about those requests.
type ledger struct {
	rest rest.Interface
}

func newLedger(cfg *rest.Config) (*ledger, error) {
	cfg = rest.CopyConfig(cfg)
	rest.AddUserAgent(cfg, "kubectl-toolledger")
	client, err := sdk.NewRESTClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("cannot build a client for %s: %w", v1alpha1.GroupVersion, err)
	}
	return &ledger{rest: client}, nil
}

// getAction reads one ToolAction; a missing one is reported in plain words.
func (l *ledger) getAction(ctx context.Context, namespace, name string) (*v1alpha1.ToolAction, error) {
	return getObject[v1alpha1.ToolAction](ctx, l, resourceActions, "ToolAction", namespace, name)
}

// listActions reads the ToolActions of a namespace ("" for all) that match
// the field selector, page by page.
func (l *ledger) listActions(ctx context.Context, namespace, fieldSelector string) ([]v1alpha1.ToolAction, error) {
	opts := metav1.ListOptions{FieldSelector: fieldSelector, Limit: listPageSize}
	var items []v1alpha1.ToolAction
	for {
		var page v1alpha1.ToolActionList
		req := l.rest.Get().Resource(resourceActions).VersionedParams(&opts, metav1.ParameterCodec)
		if namespace != "" {
			req = req.Namespace(namespace)
		}
		if err := req.Do(ctx).Into(&page); err != nil {
			return nil, fmt.Errorf("cannot list ToolActions (%s) in %s: %w", fieldSelector, scope(namespace), err)
		}
		items = append(items, page.Items...)
		if page.Continue == "" {
			return items, nil
		}
		opts.Continue = page.Continue
	}
}

func (l *ledger) getResolution(ctx context.Context, namespace, name string) (*v1alpha1.ToolResolution, error) {
	return getObject[v1alpha1.ToolResolution](ctx, l, resourceResolutions, "ToolResolution", namespace, name)
}

// getObject reads the object of a resource into a new T, which the kind
// names in errors.
func getObject[T any, PT interface {
	*T
	runtime.Object
}](ctx context.Context, l *ledger, resource, kind, namespace, name string) (PT, error) {
	object := PT(new(T))
	if err := l.rest.Get().Namespace(namespace).Resource(resource).Name(name).Do(ctx).Into(object); err != nil {
		return nil, describeGetError(err, kind, namespace, name)
	}
	return object, nil
}

func (l *ledger) createResolution(ctx context.Context, resolution *v1alpha1.ToolResolution) (*v1alpha1.ToolResolution, error) {
	var created v1alpha1.ToolResolution
	err := l.rest.Post().Namespace(resolution.Namespace).Resource(resourceResolutions).Body(resolution).Do(ctx).Into(&created)
	if err != nil {
		return nil, fmt.Errorf("cannot create a ToolResolution for ToolAction %q in namespace %q: %w",
			resolution.Spec.ActionName, resolution.Namespace, err)
	}
	return &created, nil
}

// describeGetError tells a missing object apart from a server that does not
// serve the resource at all: client-go reports both as NotFound, but only the
// latter comes from a response that is not an API status.
func describeGetError(err error, kind, namespace, name string) error {
	if apierrors.IsNotFound(err) {
		if apierrors.HasStatusCause(err, metav1.CauseTypeUnexpectedServerResponse) {
			return fmt.Errorf("the server does not serve %ss (%s); is toolledger installed in this cluster? %w", kind, v1alpha1.GroupVersion, err)
		}
		return fmt.Errorf("%s %q not found in namespace %q", kind, name, namespace)
	}
	return fmt.Errorf("cannot get %s %q in namespace %q: %w", kind, name, namespace, err)
}

func scope(namespace string) string {
	if namespace == "" {
		return "all namespaces"
	}
	return fmt.Sprintf("namespace %q", namespace)
}
