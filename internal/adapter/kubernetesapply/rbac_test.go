package kubernetesapply

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// The adapter writes as tenants' ServiceAccounts, so the manager needs no
// write on arbitrary resources: these tests hold the shipped RBAC to that.

var repoRoot = filepath.Join("..", "..", "..")

func readClusterRole(t *testing.T, path ...string) rbacv1.ClusterRole {
	t.Helper()
	manifest, err := os.ReadFile(filepath.Join(append([]string{repoRoot}, path...)...))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(manifest, &role); err != nil {
		t.Fatal(err)
	}
	return role
}

// TestManagerWritesOnlyItsOwnObjects: the generated ClusterRole (which the
// chart copies, `make verify` checks) writes the toolledger.dev resources
// and events, and may not impersonate, escalate or bind. The reviews the
// secure metrics endpoint asks for a scraper's token are no write: they
// store nothing and only answer whether the API server knows the caller.
func TestManagerWritesOnlyItsOwnObjects(t *testing.T) {
	role := readClusterRole(t, "config", "rbac", "role.yaml")
	readOnly := []string{"get", "list", "watch"}
	for _, rule := range role.Rules {
		for _, verb := range rule.Verbs {
			if slices.Contains(readOnly, verb) {
				continue
			}
			for _, group := range rule.APIGroups {
				for _, resource := range rule.Resources {
					own := group == "toolledger.dev" && resource != "*"
					events := group == "events.k8s.io" && resource == "events" && (verb == "create" || verb == "patch")
					review := verb == "create" && (group == "authentication.k8s.io" && resource == "tokenreviews" ||
						group == "authorization.k8s.io" && resource == "subjectaccessreviews")
					if !own && !events && !review {
						t.Errorf("the manager's ClusterRole may %s %s in group %q", verb, resource, group)
					}
				}
			}
		}
	}
}

// TestImpersonatorRoleImpersonatesServiceAccountsOnly: the one right the
// adapter needs, which a namespace grants with a RoleBinding.
func TestImpersonatorRoleImpersonatesServiceAccountsOnly(t *testing.T) {
	want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"impersonate"}}}
	role := readClusterRole(t, "config", "rbac", "role_impersonator.yaml")
	if role.Name != ImpersonatorRole || !slices.EqualFunc(role.Rules, want, rulesEqual) {
		t.Errorf("config/rbac/role_impersonator.yaml: %s %+v, want %s %+v", role.Name, role.Rules, ImpersonatorRole, want)
	}
	// The chart's template has the same rules, after its Helm header.
	chart, err := os.ReadFile(filepath.Join(repoRoot, "charts", "toolledger", "templates", "clusterrole-impersonator.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	_, rules, _ := strings.Cut(string(chart), "\nrules:\n")
	var chartRole rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict([]byte("rules:\n"+rules), &chartRole); err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(chartRole.Rules, want, rulesEqual) {
		t.Errorf("the chart's impersonator role has %+v, want %+v", chartRole.Rules, want)
	}
}

// TestImpersonationIsNeverBoundClusterWide: no shipped manifest binds the
// impersonator role with a ClusterRoleBinding.
func TestImpersonationIsNeverBoundClusterWide(t *testing.T) {
	for _, dir := range []string{filepath.Join(repoRoot, "config"), filepath.Join(repoRoot, "charts", "toolledger", "templates")} {
		err := filepath.WalkDir(dir, func(path string, _ os.DirEntry, err error) error {
			if err != nil || !strings.HasSuffix(path, ".yaml") {
				return err
			}
			content, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, doc := range strings.Split(string(content), "\n---") {
				if strings.Contains(doc, "kind: ClusterRoleBinding") && strings.Contains(doc, "impersonator") {
					t.Errorf("%s binds the impersonator role cluster-wide", path)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func rulesEqual(a, b rbacv1.PolicyRule) bool {
	return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) &&
		slices.Equal(a.Verbs, b.Verbs) && slices.Equal(a.ResourceNames, b.ResourceNames) && len(a.NonResourceURLs) == 0
}
