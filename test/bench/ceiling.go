package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// The ceiling's plain CRD: the ToolAction schema under another group, with
// nothing watching it.
const (
	benchGroup    = "bench.toolledger.dev"
	benchVersion  = "v1alpha1"
	benchKind     = "BenchObject"
	benchResource = "benchobjects"
)

// installBenchCRD creates benchobjects.bench.toolledger.dev from the
// ToolAction CRD in config/crd/bases: the same OpenAPI schema, CEL rules,
// selectable fields and status subresource, so that an object and its
// writes cost the API server what a ToolAction's do.
func installBenchCRD(ctx context.Context, cfg *rest.Config, root string) error {
	raw, err := os.ReadFile(filepath.Join(root, "config", "crd", "bases", "toolledger.dev_toolactions.yaml"))
	if err != nil {
		return err
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		return fmt.Errorf("cannot parse the ToolAction CRD: %w", err)
	}
	crd.ObjectMeta = metav1.ObjectMeta{Name: benchResource + "." + benchGroup}
	crd.Spec.Group = benchGroup
	crd.Spec.Names = apiextensionsv1.CustomResourceDefinitionNames{
		Plural: benchResource, Singular: "benchobject", Kind: benchKind, ListKind: benchKind + "List",
	}
	cs, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	crds := cs.ApiextensionsV1().CustomResourceDefinitions()
	if _, err := crds.Create(ctx, &crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("cannot create the benchmark CRD: %w", err)
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := crds.Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // not served yet: poll again
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

// ceilingClient writes benchobjects with plain JSON requests: no cache, no
// watch, no controller; what a bare client can get out of the API server.
type ceilingClient struct {
	rest *rest.RESTClient
}

func newCeilingClient(cfg *rest.Config) (*ceilingClient, error) {
	c := rest.CopyConfig(cfg)
	c.APIPath = "/apis"
	c.GroupVersion = &schema.GroupVersion{Group: benchGroup, Version: benchVersion}
	c.ContentType = "application/json"
	c.AcceptContentTypes = "application/json"
	c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, err
	}
	return &ceilingClient{rest: rc}, nil
}

// object runs the ceiling's happy path for one object: create, then the two
// status writes the controller makes (claim and outcome), each an update
// carrying the resourceVersion the previous write returned. With finalizer,
// it also adds a finalizer with an update of the object between create and
// claim, as the controller does today: the 4-write ceiling.
func (c *ceilingClient) object(ctx context.Context, namespace, name string, amount int, finalizer bool) error {
	obj := &v1alpha1.ToolAction{
		TypeMeta:   metav1.TypeMeta{APIVersion: benchGroup + "/" + benchVersion, Kind: benchKind},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       spec(amount),
	}
	var err error
	if obj, err = c.write(ctx, c.rest.Post().Namespace(namespace).Resource(benchResource), obj); err != nil {
		return fmt.Errorf("create: %w", err)
	}
	if finalizer {
		obj.Finalizers = append(obj.Finalizers, v1alpha1.Finalizer)
		if obj, err = c.write(ctx, c.rest.Put().Namespace(namespace).Resource(benchResource).Name(name), obj); err != nil {
			return fmt.Errorf("finalizer: %w", err)
		}
	}
	now := time.Now()
	obj.Status = executingStatus(namespace, name, amount, now)
	if obj, err = c.write(ctx, c.rest.Put().Namespace(namespace).Resource(benchResource).Name(name).SubResource("status"), obj); err != nil {
		return fmt.Errorf("claim: %w", err)
	}
	obj.Status = succeededStatus(namespace, name, amount, now)
	if _, err = c.write(ctx, c.rest.Put().Namespace(namespace).Resource(benchResource).Name(name).SubResource("status"), obj); err != nil {
		return fmt.Errorf("outcome: %w", err)
	}
	return nil
}

func (c *ceilingClient) write(ctx context.Context, req *rest.Request, obj *v1alpha1.ToolAction) (*v1alpha1.ToolAction, error) {
	obj.APIVersion, obj.Kind = benchGroup+"/"+benchVersion, benchKind
	body, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	raw, err := req.Body(body).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	var out v1alpha1.ToolAction
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ceilingList is an empty list of the ceiling's objects, for counting them.
func ceilingList() *unstructured.UnstructuredList {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(schema.GroupVersionKind{Group: benchGroup, Version: benchVersion, Kind: benchKind + "List"})
	return list
}

// floorWatches open what any controller whose callers wait for an outcome
// makes the API server serve, beside the bare client's writes: the
// controller's informer watch of the resource in every namespace, and the
// callers' one shared watch of the namespace they write in. Their events
// are read and dropped; stop closes both.
func floorWatches(ctx context.Context, cfg *rest.Config, namespace string) (stop func(), err error) {
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	resource := client.Resource(schema.GroupVersionResource{Group: benchGroup, Version: benchVersion, Resource: benchResource})
	ctx, cancel := context.WithCancel(ctx)
	var drained sync.WaitGroup
	for _, watched := range []dynamic.ResourceInterface{resource, resource.Namespace(namespace)} {
		w, err := watched.Watch(ctx, metav1.ListOptions{AllowWatchBookmarks: true})
		if err != nil {
			cancel()
			drained.Wait()
			return nil, fmt.Errorf("cannot open the floor's watch: %w", err)
		}
		drained.Add(1)
		go func() {
			defer drained.Done()
			defer w.Stop()
			for range w.ResultChan() {
				// Serving the event is the cost measured; reading it is all.
			}
		}()
	}
	return func() { cancel(); drained.Wait() }, nil
}
