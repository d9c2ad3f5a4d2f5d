// Package chart checks the shipped RBAC: that what the Helm chart renders
// is config/rbac, which the envtest suites exercise, and that the roles
// aggregated into the built-in ones stay namespaced.
package chart

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	archivev1alpha1 "github.com/toolledger/toolledger/api/archive/v1alpha1"
)

var repoRoot = filepath.Join("..", "..")

// The release renders its objects as "ledger-toolledger-<role>", where
// config/rbac names them "toolledger-<role>".
const (
	release       = "ledger"
	chartPrefix   = release + "-toolledger-"
	configPrefix  = "toolledger-"
	aggregateTo   = "rbac.authorization.k8s.io/aggregate-to-"
	readerBinding = chartPrefix + "clustertool-reader"
)

// TestChartClusterRolesMatchConfig: every ClusterRole config/rbac installs
// renders in the chart, under the release's name, with the same rules and
// aggregated into the same built-in roles, and the chart renders no other.
//
// The MCP gateway's and the web console's roles render with them
// (mcpGateway.enabled, console.enabled), the gateway's in one of its two
// forms (mcpGateway.constrainedImpersonation), each of which narrows its
// namespaces rule to the served namespace, which config/rbac cannot know.
func TestChartClusterRolesMatchConfig(t *testing.T) {
	chart := clusterRoles(t, helmTemplate(t, frontEnds...))
	constrained := clusterRoles(t, helmTemplate(t, append(slices.Clone(frontEnds), "--set", "mcpGateway.constrainedImpersonation=true")...))
	for name, role := range constrained {
		if _, found := chart[name]; !found {
			chart[name] = role
		}
	}
	if _, found := constrained[chartPrefix+"mcp-gateway"]; found {
		t.Errorf("with constrainedImpersonation the chart still renders %s", chartPrefix+"mcp-gateway")
	}
	for _, name := range []string{chartPrefix + "mcp-gateway", chartPrefix + "mcp-gateway-constrained"} {
		gateway, found := chart[name]
		if !found {
			continue
		}
		narrowed := 0
		for i, rule := range gateway.Rules {
			if slices.Equal(rule.Resources, []string{"namespaces"}) {
				if !slices.Equal(rule.ResourceNames, []string{"shop"}) {
					t.Errorf("the chart's %s reads namespaces %v, not the served one only", gateway.Name, rule.ResourceNames)
				}
				gateway.Rules[i].ResourceNames = nil
				narrowed++
			}
		}
		if narrowed != 1 {
			t.Errorf("the chart's %s has %d namespaces rules, want 1", gateway.Name, narrowed)
		}
	}
	config := configClusterRoles(t)
	for name, want := range config {
		got, found := chart[chartPrefix+strings.TrimPrefix(name, configPrefix)]
		if !found {
			t.Errorf("config/rbac installs ClusterRole %s, the chart renders no %s", name, chartPrefix+strings.TrimPrefix(name, configPrefix))
			continue
		}
		if !reflect.DeepEqual(got.Rules, want.Rules) {
			t.Errorf("the chart's %s has the rules\n  %+v\nconfig/rbac's %s\n  %+v", got.Name, got.Rules, name, want.Rules)
		}
		if g, w := aggregation(got), aggregation(want); !reflect.DeepEqual(g, w) {
			t.Errorf("the chart's %s aggregates into %v, config/rbac's %s into %v", got.Name, g, name, w)
		}
		if got.AggregationRule != nil || want.AggregationRule != nil {
			t.Errorf("%s: neither copy may aggregate other roles", name)
		}
	}
	for name := range chart {
		if _, found := config[configPrefix+strings.TrimPrefix(name, chartPrefix)]; !found {
			t.Errorf("the chart renders ClusterRole %s, which config/rbac does not install", name)
		}
	}
}

// TestAggregatedRolesAreNamespaced: admin, edit and view are also bound
// cluster-wide, where a rule on a cluster-scoped resource in a role
// aggregated into them would reach the whole cluster; so every resource
// of those roles is a namespaced CRD of config/crd.
func TestAggregatedRolesAreNamespaced(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(repoRoot, "config", "crd", "bases", "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no CRDs in config/crd/bases: %v", err)
	}
	namespaced := map[string]bool{}
	for _, path := range paths {
		content, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(content, &crd); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		namespaced[crd.Spec.Group+"/"+crd.Spec.Names.Plural] = crd.Spec.Scope == apiextensionsv1.NamespaceScoped
	}
	// Served by the archive API (internal/archiveapi), namespaced.
	namespaced[archivev1alpha1.GroupVersion.Group+"/"+archivev1alpha1.Resource] = true
	namespaced[archivev1alpha1.GroupVersion.Group+"/"+archivev1alpha1.ChainResource] = true
	aggregated := 0
	for name, role := range configClusterRoles(t) {
		if len(aggregation(role)) == 0 {
			continue
		}
		aggregated++
		for _, rule := range role.Rules {
			for _, group := range rule.APIGroups {
				for _, resource := range rule.Resources {
					if !namespaced[group+"/"+resource] {
						t.Errorf("%s aggregates into %v, and grants %s on %q in group %q, which is not a namespaced resource of config/crd or the archive API",
							name, aggregation(role), rule.Verbs, resource, group)
					}
				}
			}
		}
	}
	if aggregated == 0 {
		t.Error("config/rbac aggregates no role into the built-in ones")
	}
}

// TestClusterToolReadersBinding: the chart binds the ClusterTool reader to
// the subjects of clusterToolReaders, and to nobody by default.
func TestClusterToolReadersBinding(t *testing.T) {
	if bindings := clusterRoleBindings(t, helmTemplate(t)); bindings[readerBinding] != nil {
		t.Errorf("by default the chart binds %s to %+v", readerBinding, bindings[readerBinding].Subjects)
	}
	bindings := clusterRoleBindings(t, helmTemplate(t,
		"--set", "clusterToolReaders[0].kind=Group", "--set", "clusterToolReaders[0].name=ops",
		"--set", "clusterToolReaders[0].apiGroup=rbac.authorization.k8s.io"))
	binding := bindings[readerBinding]
	if binding == nil {
		t.Fatalf("with clusterToolReaders set the chart renders no ClusterRoleBinding %s", readerBinding)
	}
	wantRef := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: readerBinding}
	wantSubjects := []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "ops"}}
	if binding.RoleRef != wantRef || !reflect.DeepEqual(binding.Subjects, wantSubjects) {
		t.Errorf("%s binds %+v to %+v, want %+v to %+v", readerBinding, binding.RoleRef, binding.Subjects, wantRef, wantSubjects)
	}
	for name, b := range bindings {
		if b.RoleRef.Name == chartPrefix+"clustertool-admin" {
			t.Errorf("the chart binds the ClusterTool admin role (%s): only a platform admin may", name)
		}
	}
}

// TestImpersonatorBoundOnlyInListedNamespaces: the impersonator ClusterRole
// is never bound cluster-wide, and is bound to the manager's ServiceAccount
// by a RoleBinding in each namespace of kubernetesApply.namespaces and in
// no other.
func TestImpersonatorBoundOnlyInListedNamespaces(t *testing.T) {
	const impersonator = chartPrefix + "impersonator"
	for _, tc := range []struct {
		name       string
		args       []string
		namespaces []string
	}{
		{"defaults", nil, nil},
		{"two namespaces", []string{"--namespace", "ops", "--set", "serviceAccount.name=ledger",
			"--set", "kubernetesApply.namespaces={shop,billing}"}, []string{"billing", "shop"}},
	} {
		manifests := helmTemplate(t, tc.args...)
		if clusterRoles(t, manifests)[impersonator] == nil {
			t.Errorf("%s: no ClusterRole %s rendered", tc.name, impersonator)
		}
		for name, b := range clusterRoleBindings(t, manifests) {
			if b.RoleRef.Name == impersonator {
				t.Errorf("%s: the ClusterRoleBinding %s binds %s cluster-wide", tc.name, name, impersonator)
			}
		}
		var namespaces []string
		for _, b := range roleBindings(t, manifests) {
			if b.RoleRef.Name != impersonator {
				continue
			}
			namespaces = append(namespaces, b.Namespace)
			want := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "ledger", Namespace: "ops"}}
			if b.Name != impersonator || b.RoleRef.Kind != "ClusterRole" || !reflect.DeepEqual(b.Subjects, want) {
				t.Errorf("%s: the RoleBinding %s/%s binds the %s %s to %+v, want %s binding it to %+v",
					tc.name, b.Namespace, b.Name, b.RoleRef.Kind, b.RoleRef.Name, b.Subjects, impersonator, want)
			}
		}
		slices.Sort(namespaces)
		if !slices.Equal(namespaces, tc.namespaces) {
			t.Errorf("%s: %s is bound in the namespaces %v, want %v", tc.name, impersonator, namespaces, tc.namespaces)
		}
	}
}

// helmTemplate renders the chart with args, by bin/helm, which `make test`
// builds.
func helmTemplate(t *testing.T, args ...string) []byte {
	t.Helper()
	helm := filepath.Join(repoRoot, "bin", "helm")
	if _, err := os.Stat(helm); err != nil {
		t.Fatalf("no %s: `make test` builds it", helm)
	}
	cmd := exec.CommandContext(t.Context(), helm, append([]string{"template", release, filepath.Join(repoRoot, "charts", "toolledger"),
		"--namespace", "toolledger-system"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	return out
}

// configClusterRoles are the ClusterRoles of the files
// config/rbac/kustomization.yaml installs, by name.
func configClusterRoles(t *testing.T) map[string]*rbacv1.ClusterRole {
	t.Helper()
	var kustomization struct {
		Resources []string `json:"resources"`
	}
	content, err := os.ReadFile(filepath.Join(repoRoot, "config", "rbac", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(content, &kustomization); err != nil {
		t.Fatal(err)
	}
	var all []byte
	for _, file := range kustomization.Resources {
		content, err := os.ReadFile(filepath.Join(repoRoot, "config", "rbac", file))
		if err != nil {
			t.Fatal(err)
		}
		all = append(append(all, content...), "\n---\n"...)
	}
	roles := clusterRoles(t, all)
	if len(roles) == 0 {
		t.Fatal("config/rbac installs no ClusterRole")
	}
	return roles
}

func clusterRoles(t *testing.T, manifests []byte) map[string]*rbacv1.ClusterRole {
	t.Helper()
	return objectsOfKind[rbacv1.ClusterRole](t, manifests, "ClusterRole", func(r *rbacv1.ClusterRole) string { return r.Name })
}

func clusterRoleBindings(t *testing.T, manifests []byte) map[string]*rbacv1.ClusterRoleBinding {
	t.Helper()
	return objectsOfKind[rbacv1.ClusterRoleBinding](t, manifests, "ClusterRoleBinding", func(b *rbacv1.ClusterRoleBinding) string { return b.Name })
}

// roleBindings are the RoleBindings, by namespace and name.
func roleBindings(t *testing.T, manifests []byte) map[string]*rbacv1.RoleBinding {
	t.Helper()
	return objectsOfKind[rbacv1.RoleBinding](t, manifests, "RoleBinding", func(b *rbacv1.RoleBinding) string { return b.Namespace + "/" + b.Name })
}

// objectsOfKind decodes the objects of kind in a multi-document YAML stream, by name.
func objectsOfKind[T any](t *testing.T, manifests []byte, kind string, name func(*T) string) map[string]*T {
	t.Helper()
	out := map[string]*T{}
	decoder := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifests)))
	for {
		doc, err := decoder.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatal(err)
		}
		if meta.Kind != kind {
			continue
		}
		object := new(T)
		if err := yaml.UnmarshalStrict(doc, object); err != nil {
			t.Fatalf("%s: %v\n%s", kind, err, doc)
		}
		out[name(object)] = object
	}
}

// aggregation lists the built-in roles a ClusterRole aggregates into.
func aggregation(role *rbacv1.ClusterRole) map[string]string {
	out := map[string]string{}
	for label, value := range role.Labels {
		if strings.HasPrefix(label, aggregateTo) {
			out[label] = value
		}
	}
	return out
}
