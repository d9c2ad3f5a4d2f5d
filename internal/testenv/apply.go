package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ApplyFile server-side applies every object of a multi-document YAML file,
// such as config/admission's policy, under the field owner.
func ApplyFile(ctx context.Context, cfg *rest.Config, path, owner string) error {
	return eachObject(cfg, path, func(c client.Client, obj *unstructured.Unstructured) error {
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(owner), client.ForceOwnership); err != nil {
			return fmt.Errorf("cannot apply %s %s from %s: %w", obj.GetKind(), obj.GetName(), path, err)
		}
		return nil
	})
}

// DeleteFile deletes the objects of a file ApplyFile applied.
func DeleteFile(ctx context.Context, cfg *rest.Config, path string) error {
	return eachObject(cfg, path, func(c client.Client, obj *unstructured.Unstructured) error {
		if err := client.IgnoreNotFound(c.Delete(ctx, obj)); err != nil {
			return fmt.Errorf("cannot delete %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
		return nil
	})
}

// eachObject calls fn with a client for every object of the file, in order.
func eachObject(cfg *rest.Config, path string, fn func(client.Client, *unstructured.Unstructured) error) error {
	objects, err := readObjects(path)
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	for _, obj := range objects {
		if err := fn(c, obj); err != nil {
			return err
		}
	}
	return nil
}

func readObjects(path string) ([]*unstructured.Unstructured, error) {
	content, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(content), 4096)
	var objects []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		if err := decoder.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objects, nil
			}
			return nil, fmt.Errorf("cannot parse %s: %w", path, err)
		}
		if len(obj.Object) > 0 {
			objects = append(objects, obj)
		}
	}
}
