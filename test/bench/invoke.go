package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"strings"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/sdk"
)

// request is the SDK request of one benchmark action.
func request(namespace, key string, amount int) sdk.Request {
	return sdk.Request{
		Namespace:  namespace,
		Key:        key,
		Tool:       toolName,
		Parameters: parameters(amount),
		Provenance: provenance.DeepCopy(),
	}
}

// invokeSucceeded invokes through the SDK and requires Succeeded.
func invokeSucceeded(ctx context.Context, c *sdk.Client, req sdk.Request) (*sdk.Outcome, error) {
	out, err := c.Invoke(ctx, req)
	if err != nil {
		return out, err
	}
	if out.Phase != v1alpha1.PhaseSucceeded {
		return out, fmt.Errorf("toolaction %s/%s settled as %s: %s %s", req.Namespace, req.Key, out.Phase, out.ErrorReason, out.Message)
	}
	return out, nil
}

// countingTransport counts the requests a client sends.
type countingTransport struct {
	next  http.RoundTripper
	count *atomic.Int64
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.count.Add(1)
	return t.next.RoundTrip(r)
}

// countingConfig copies cfg with every request counted in count.
func countingConfig(cfg *rest.Config, count *atomic.Int64) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return countingTransport{next: rt, count: count}
	}
	return out
}

// manifestInvoker applies an action with one server-side apply and then
// watches that one action until it settles. As a plain manifest
// (`kubectl apply --server-side`), it applies without the controller's
// finalizer, which the SDK sets at creation: the admission policy of
// config/admission sets it at creation; without the policy the controller
// adds it itself, with a fourth write before its claim. With the SDK's
// field manager and finalizer it is the SDK as it was before its
// invocations shared one watch per namespace: an apply and a watch each;
// with create, the same body is created (POST) instead of applied, which
// sets the first write of server-side apply beside a plain create.
type manifestInvoker struct {
	rest         *rest.RESTClient
	fieldManager string
	finalizers   []string
	create       bool
}

func newManifestInvoker(cfg *rest.Config, fieldManager string, finalizers ...string) (*manifestInvoker, error) {
	rc, err := sdk.NewRESTClient(cfg)
	if err != nil {
		return nil, err
	}
	return &manifestInvoker{rest: rc, fieldManager: fieldManager, finalizers: finalizers}, nil
}

// creating is f creating its actions instead of applying them.
func (f *manifestInvoker) creating() *manifestInvoker {
	c := *f
	c.create = true
	return &c
}

type applyObject struct {
	APIVersion string                  `json:"apiVersion"`
	Kind       string                  `json:"kind"`
	Metadata   applyMeta               `json:"metadata"`
	Spec       v1alpha1.ToolActionSpec `json:"spec"`
}

type applyMeta struct {
	Name       string   `json:"name"`
	Namespace  string   `json:"namespace"`
	Finalizers []string `json:"finalizers,omitempty"`
}

// manifestFieldManager is kubectl's field manager for server-side apply.
const manifestFieldManager = "kubectl"

func (f *manifestInvoker) invoke(ctx context.Context, namespace, key string, amount int) error {
	body, err := json.Marshal(applyObject{
		APIVersion: v1alpha1.GroupVersion.String(), Kind: "ToolAction",
		Metadata: applyMeta{Name: key, Namespace: namespace, Finalizers: f.finalizers},
		Spec:     spec(amount),
	})
	if err != nil {
		return err
	}
	var action v1alpha1.ToolAction
	write := f.rest.Patch(types.ApplyPatchType).Name(key)
	if f.create {
		write = f.rest.Post()
	}
	if err := write.Namespace(namespace).Resource("toolactions").
		Param("fieldManager", f.fieldManager).Body(body).Do(ctx).Into(&action); err != nil {
		return fmt.Errorf("cannot write toolaction %s/%s: %w", namespace, key, err)
	}
	rv := action.ResourceVersion
	for range 100 { // a watch the server ends is resumed; bounded anyway
		if action.Status.Phase.IsSettled() {
			break
		}
		w, err := f.rest.Get().Namespace(namespace).Resource("toolactions").
			VersionedParams(&metav1.ListOptions{
				Watch: true, FieldSelector: fields.OneTermEqualSelector("metadata.name", key).String(),
				ResourceVersion: rv, AllowWatchBookmarks: true,
			}, metav1.ParameterCodec).Watch(ctx)
		if err != nil {
			return fmt.Errorf("cannot watch toolaction %s/%s: %w", namespace, key, err)
		}
		for event := range w.ResultChan() {
			if event.Type != watch.Added && event.Type != watch.Modified {
				continue
			}
			if a, ok := event.Object.(*v1alpha1.ToolAction); ok {
				action, rv = *a, a.ResourceVersion
				if a.Status.Phase.IsSettled() {
					break
				}
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if action.Status.Phase != v1alpha1.PhaseSucceeded {
		return fmt.Errorf("toolaction %s/%s settled as %q", namespace, key, action.Status.Phase)
	}
	return nil
}

// createTimingTransport stores in last how long the latest create of a
// ToolAction (the SDK's apply) took to be answered, in nanoseconds.
type createTimingTransport struct {
	next http.RoundTripper
	last *atomic.Int64
}

func (t createTimingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if !isActionWrite(r) {
		return t.next.RoundTrip(r)
	}
	began := time.Now()
	resp, err := t.next.RoundTrip(r)
	t.last.Store(int64(time.Since(began)))
	return resp, err
}

// isActionWrite is whether r creates or applies a ToolAction, its status
// aside.
func isActionWrite(r *http.Request) bool {
	if r.Method != http.MethodPost && r.Method != http.MethodPatch {
		return false
	}
	dir, _ := path.Split(r.URL.Path)
	return strings.HasSuffix(r.URL.Path, "/toolactions") || strings.HasSuffix(dir, "/toolactions/")
}

// createTimingConfig copies cfg with the answer to each ToolAction create
// timed into last.
func createTimingConfig(cfg *rest.Config, last *atomic.Int64) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return createTimingTransport{next: rt, last: last}
	}
	return out
}
