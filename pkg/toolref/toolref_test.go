package toolref_test

import (
	"context"
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/toolref"
)

// source holds Tools of shop, ClusterTools and the labels of shop.
type source struct {
	tools        map[string]*v1alpha1.Tool
	clusterTools map[string]*v1alpha1.ClusterTool
	shopLabels   map[string]string
	err          error
}

func (s source) Tool(_ context.Context, namespace, name string) (*v1alpha1.Tool, error) {
	if namespace != "shop" {
		return nil, nil
	}
	return s.tools[name], s.err
}

func (s source) ClusterTool(_ context.Context, name string) (*v1alpha1.ClusterTool, error) {
	return s.clusterTools[name], s.err
}

func (s source) NamespaceLabels(context.Context, string) (map[string]string, error) {
	return s.shopLabels, nil
}

func clusterTool(name string, selector *metav1.LabelSelector) *v1alpha1.ClusterTool {
	return &v1alpha1.ClusterTool{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.ClusterToolSpec{ToolSpec: v1alpha1.ToolSpec{Operation: name}, NamespaceSelector: selector}}
}

func TestFind(t *testing.T) {
	src := source{
		tools: map[string]*v1alpha1.Tool{"charge": {ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "charge"}}},
		clusterTools: map[string]*v1alpha1.ClusterTool{
			"platform": clusterTool("platform", &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "platform"}}),
			"tenants":  clusterTool("tenants", &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "tenant"}}),
			"nobody":   clusterTool("nobody", nil),
			"broken": clusterTool("broken", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "tier", Operator: "Near"}}}),
		},
		shopLabels: map[string]string{"tier": "platform"},
	}
	tests := []struct {
		ref       v1alpha1.ToolReference
		found     string
		err       string
		errTarget any
	}{
		{ref: v1alpha1.ToolReference{Name: "charge"}, found: "charge"},
		{ref: v1alpha1.ToolReference{Name: "refund"}, err: `tool "refund" not found in namespace "shop"`, errTarget: new(*toolref.NotFoundError)},
		{ref: v1alpha1.ToolReference{Kind: v1alpha1.KindClusterTool, Name: "platform"}, found: "platform"},
		{ref: v1alpha1.ToolReference{Kind: v1alpha1.KindClusterTool, Name: "gone"}, err: `clustertool "gone" not found`, errTarget: new(*toolref.NotFoundError)},
		{ref: v1alpha1.ToolReference{Kind: v1alpha1.KindClusterTool, Name: "tenants"}, err: `clustertool "tenants" does not admit namespace "shop"`,
			errTarget: new(*toolref.NotAdmittedError)},
		{ref: v1alpha1.ToolReference{Kind: v1alpha1.KindClusterTool, Name: "nobody"}, err: `clustertool "nobody" does not admit namespace "shop"`,
			errTarget: new(*toolref.NotAdmittedError)},
		{ref: v1alpha1.ToolReference{Kind: v1alpha1.KindClusterTool, Name: "broken"},
			err:       `clustertool "broken" has an invalid namespaceSelector: "Near" is not a valid label selector operator`,
			errTarget: new(*toolref.NotAdmittedError)},
	}
	for _, tt := range tests {
		t.Run(tt.ref.KindOrDefault()+"/"+tt.ref.Name, func(t *testing.T) {
			tool, err := toolref.Find(t.Context(), src, "shop", tt.ref)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err || !errors.As(err, tt.errTarget) {
					t.Fatalf("error %v (%T), want %q as %T", err, err, tt.err, tt.errTarget)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tool.Name != tt.found {
				t.Errorf("found %q, want %q", tool.Name, tt.found)
			}
		})
	}
}

// A ClusterTool comes back as a Tool of its name and spec, with no
// namespace; a Source's error comes back as it is.
func TestFindClusterToolAsTool(t *testing.T) {
	src := source{clusterTools: map[string]*v1alpha1.ClusterTool{"platform": clusterTool("platform", &metav1.LabelSelector{})}}
	tool, err := toolref.Find(t.Context(), src, "shop", v1alpha1.ToolReference{Kind: v1alpha1.KindClusterTool, Name: "platform"})
	if err != nil {
		t.Fatal(err)
	}
	if tool.Name != "platform" || tool.Namespace != "" || tool.Spec.Operation != "platform" {
		t.Errorf("tool %s/%s with operation %q, want /platform with platform", tool.Namespace, tool.Name, tool.Spec.Operation)
	}
	unreadable := errors.New("forbidden")
	src.err = unreadable
	if _, err := toolref.Find(t.Context(), src, "shop", v1alpha1.ToolReference{Name: "charge"}); !errors.Is(err, unreadable) {
		t.Errorf("error %v, want the Source's", err)
	}
}
