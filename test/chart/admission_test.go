package chart

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// servesPolicies makes helm template render what a cluster serving
// ValidatingAdmissionPolicy installs.
var servesPolicies = []string{"--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"}

// TestParametersPolicy: the chart installs config/admission's parameters
// policy as it is, with the release's bound in place of 10000, and a value
// turns it off.
func TestParametersPolicy(t *testing.T) {
	config, err := os.ReadFile(filepath.Join(repoRoot, "config", "admission", "parameters_policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := decodeObjects(t, config)
	if len(want) != 2 {
		t.Fatalf("config/admission/parameters_policy.yaml has %d objects, want the policy and its binding", len(want))
	}
	policyName := want[0].GetName()

	rendered := decodeObjects(t, helmTemplate(t, append(servesPolicies, "--set", "parametersPolicy.maxValues=500")...))
	for _, w := range want {
		got := find(rendered, w.GetKind(), w.GetName())
		if got == nil {
			t.Fatalf("the chart renders no %s %s", w.GetKind(), w.GetName())
		}
		if w.GetKind() == "ValidatingAdmissionPolicy" {
			setMaxValues(t, w, "500")
		}
		if diff := cmp.Diff(w.Object, got.Object); diff != "" {
			t.Errorf("%s %s differs from config/admission's (-want +got):\n%s", w.GetKind(), w.GetName(), diff)
		}
	}

	off := decodeObjects(t, helmTemplate(t, append(servesPolicies, "--set", "parametersPolicy.enabled=false")...))
	if find(off, "ValidatingAdmissionPolicy", policyName) != nil {
		t.Error("parametersPolicy.enabled=false still renders the policy")
	}
	if _, err := helmTemplateErr(t, append(servesPolicies, "--set", "parametersPolicy.maxValues=0")...); err == nil ||
		!strings.Contains(err.Error(), "parametersPolicy.maxValues must be a positive number of values") {
		t.Errorf("maxValues=0: err = %v, want the chart to refuse it", err)
	}
}

// setMaxValues sets the policy's variable maxValues to expression.
func setMaxValues(t *testing.T, policy *unstructured.Unstructured, expression string) {
	t.Helper()
	variables, _, _ := unstructured.NestedSlice(policy.Object, "spec", "variables")
	for _, v := range variables {
		if variable, _ := v.(map[string]any); variable["name"] == "maxValues" {
			variable["expression"] = expression
			if err := unstructured.SetNestedSlice(policy.Object, variables, "spec", "variables"); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatal("the policy has no variable maxValues")
}
