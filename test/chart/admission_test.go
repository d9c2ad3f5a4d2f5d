package chart

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// servesPolicies makes helm template render what a cluster serving
// ValidatingAdmissionPolicy installs.
var servesPolicies = []string{"--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"}

// TestParametersPolicy: the chart installs config/admission's parameters
// policy as it is, with the release's bound in place of 10000, and a value
// turns it off.
func TestParametersPolicy(t *testing.T) {
	want := configAdmission(t, "parameters_policy.yaml")
	if len(want) != 2 {
		t.Fatalf("config/admission/parameters_policy.yaml has %d objects, want the policy and its binding", len(want))
	}
	policyName := want[0].GetName()

	rendered := decodeObjects(t, helmTemplate(t, append(servesPolicies, "--set", "parametersPolicy.maxValues=500")...))
	checkRenderedAsConfig(t, rendered, want, "with maxValues 500", func(w, _ *unstructured.Unstructured) {
		if w.GetKind() == "ValidatingAdmissionPolicy" {
			setMaxValues(t, w, "500")
		}
	})

	off := decodeObjects(t, helmTemplate(t, append(servesPolicies, "--set", "parametersPolicy.enabled=false")...))
	if find(off, "ValidatingAdmissionPolicy", policyName) != nil {
		t.Error("parametersPolicy.enabled=false still renders the policy")
	}
	if _, err := helmTemplateErr(t, append(servesPolicies, "--set", "parametersPolicy.maxValues=0")...); err == nil ||
		!strings.Contains(err.Error(), "parametersPolicy.maxValues must be a positive number of values") {
		t.Errorf("maxValues=0: err = %v, want the chart to refuse it", err)
	}
}

// TestTraceContextPolicy: the chart installs config/admission's trace
// context policy as it is where the cluster serves
// ValidatingAdmissionPolicy, and a value turns it off.
func TestTraceContextPolicy(t *testing.T) {
	want := configAdmission(t, "trace_context_policy.yaml")
	if len(want) != 2 {
		t.Fatalf("config/admission/trace_context_policy.yaml has %d objects, want the policy and its binding", len(want))
	}
	checkRenderedAsConfig(t, decodeObjects(t, helmTemplate(t, servesPolicies...)), want, "where policies are served", nil)
	for when, args := range map[string][]string{
		"traceContextPolicy.enabled=false": append(slices.Clone(servesPolicies), "--set", "traceContextPolicy.enabled=false"),
		"a cluster without policies":       nil,
	} {
		if find(decodeObjects(t, helmTemplate(t, args...)), "ValidatingAdmissionPolicy", want[0].GetName()) != nil {
			t.Errorf("with %s the chart renders the policy", when)
		}
	}
}

// servesMutatingPolicies makes helm template render what a cluster serving
// MutatingAdmissionPolicy installs.
var servesMutatingPolicies = []string{"--api-versions", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"}

// TestMutatingPoliciesWhereServed: where the cluster serves
// MutatingAdmissionPolicy, the chart installs config/admission's identity
// and outcome finalizer policies as they are; elsewhere neither.
func TestMutatingPoliciesWhereServed(t *testing.T) {
	rendered := decodeObjects(t, helmTemplate(t, servesMutatingPolicies...))
	for _, file := range []string{"identity_policy.yaml", "outcome_finalizer_policy.yaml"} {
		want := configAdmission(t, file)
		if !slices.ContainsFunc(want, func(o *unstructured.Unstructured) bool { return o.GetKind() == "MutatingAdmissionPolicy" }) {
			t.Fatalf("config/admission/%s has no MutatingAdmissionPolicy", file)
		}
		checkRenderedAsConfig(t, rendered, want, "where MutatingAdmissionPolicy is served", nil)
	}
	unserved := decodeObjects(t, helmTemplate(t))
	for _, kind := range []string{"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"} {
		if n := count(unserved, kind); n != 0 {
			t.Errorf("where MutatingAdmissionPolicy is not served the chart renders %d %s", n, kind)
		}
	}
}

// TestGuardPoliciesExemptTheRelease: the guard policies are
// config/admission's, exempting the release's ServiceAccount and
// tombstoneGuard.breakGlassGroup in place of config/admission's manager and
// group, which no longer appear.
func TestGuardPoliciesExemptTheRelease(t *testing.T) {
	const (
		configManager = "system:serviceaccount:toolledger-system:toolledger-controller-manager"
		configGroup   = "toolledger:break-glass"
		manager       = "system:serviceaccount:ops:ledger"
		group         = "oncall"
	)
	rendered := decodeObjects(t, helmTemplate(t, append(slices.Clone(servesPolicies), "--namespace", "ops",
		"--set", "serviceAccount.name=ledger", "--set", "tombstoneGuard.breakGlassGroup="+group)...))
	want := configAdmission(t, "tombstone_guard_policy.yaml")
	if n := count(want, "ValidatingAdmissionPolicy"); n != 2 {
		t.Fatalf("config/admission/tombstone_guard_policy.yaml has %d policies, want the action and the tombstone guards", n)
	}
	checkRenderedAsConfig(t, rendered, want, "with the release's exemptions", func(w, got *unstructured.Unstructured) {
		if w.GetKind() == "ValidatingAdmissionPolicy" {
			checkExemptions(t, got, manager, group)
		}
		w.Object = replaceStrings(w.Object, strings.NewReplacer(configManager, manager, configGroup, group)).(map[string]any)
	})
}

// checkRenderedAsConfig: the chart renders each of config/admission's
// objects in want, equal to it once adjust (when set) has made it the
// release's; when names the rendering in messages.
func checkRenderedAsConfig(t *testing.T, rendered, want []*unstructured.Unstructured, when string, adjust func(want, got *unstructured.Unstructured)) {
	t.Helper()
	for _, w := range want {
		got := find(rendered, w.GetKind(), w.GetName())
		if got == nil {
			t.Errorf("%s: the chart renders no %s %s", when, w.GetKind(), w.GetName())
			continue
		}
		if adjust != nil {
			adjust(w, got)
		}
		if diff := cmp.Diff(w.Object, got.Object); diff != "" {
			t.Errorf("%s: %s %s differs from config/admission's (-want +got):\n%s", when, w.GetKind(), w.GetName(), diff)
		}
	}
}

// checkExemptions: the policy's match conditions let the manager's user and
// the break-glass group through.
func checkExemptions(t *testing.T, policy *unstructured.Unstructured, manager, group string) {
	t.Helper()
	var typed admissionregistrationv1.ValidatingAdmissionPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(policy.Object, &typed); err != nil {
		t.Fatalf("%s: %v", policy.GetName(), err)
	}
	var conditions []string
	for _, c := range typed.Spec.MatchConditions {
		conditions = append(conditions, c.Expression)
	}
	for _, exemption := range []string{
		`request.userInfo.username != "` + manager + `"`,
		`!("` + group + `" in request.userInfo.groups)`,
	} {
		if !slices.Contains(conditions, exemption) {
			t.Errorf("%s: the match conditions %q lack %s", policy.GetName(), conditions, exemption)
		}
	}
}

// replaceStrings applies r to every string in v, a decoded YAML value.
func replaceStrings(v any, r *strings.Replacer) any {
	switch v := v.(type) {
	case string:
		return r.Replace(v)
	case map[string]any:
		for k, e := range v {
			v[k] = replaceStrings(e, r)
		}
	case []any:
		for i, e := range v {
			v[i] = replaceStrings(e, r)
		}
	}
	return v
}

// configAdmission are the objects of config/admission/file.
func configAdmission(t *testing.T, file string) []*unstructured.Unstructured {
	t.Helper()
	content, err := os.ReadFile(filepath.Join(repoRoot, "config", "admission", file))
	if err != nil {
		t.Fatal(err)
	}
	objects := decodeObjects(t, content)
	if len(objects) == 0 {
		t.Fatalf("config/admission/%s has no object", file)
	}
	return objects
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
