package testenv

import (
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The constants must name what config/ installs: the harnesses and
// toolledger-dev impersonate ManagerUser, and the chart replaces the
// policy's literal names with its own.
func TestGuardIdentitiesMatchConfig(t *testing.T) {
	root := repoRoot()
	accounts, err := readObjects(filepath.Join(root, "config", "rbac", "service_account.yaml"))
	if err != nil || len(accounts) != 1 {
		t.Fatalf("cannot read the manager's ServiceAccount: %v (%d objects)", err, len(accounts))
	}
	if user := "system:serviceaccount:" + accounts[0].GetNamespace() + ":" + accounts[0].GetName(); user != ManagerUser {
		t.Errorf("ManagerUser = %q, but config/rbac installs %q", ManagerUser, user)
	}

	objects, err := readObjects(filepath.Join(root, "config", "admission", "tombstone_guard_policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	policies := map[string]bool{}
	for _, obj := range objects {
		if obj.GetKind() != "ValidatingAdmissionPolicy" {
			continue
		}
		policies[obj.GetName()] = true
		conditions, _, _ := unstructured.NestedSlice(obj.Object, "spec", "matchConditions")
		var expressions []string
		for _, c := range conditions {
			condition, _ := c.(map[string]any)
			expression, _, _ := unstructured.NestedString(condition, "expression")
			expressions = append(expressions, expression)
		}
		all := strings.Join(expressions, "\n")
		for _, exempt := range []string{`"` + ManagerUser + `"`, `"` + BreakGlassGroup + `"`} {
			if !strings.Contains(all, exempt) {
				t.Errorf("the matchConditions of %s do not exempt %s:\n%s", obj.GetName(), exempt, all)
			}
		}
	}
	for _, name := range []string{actionGuardPolicy, tombstoneGuardPolicy} {
		if !policies[name] {
			t.Errorf("no ValidatingAdmissionPolicy %s in the guard policy file (has %v)", name, policies)
		}
	}
}
