package kubectlplugin_test

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// krewPlugin is the part of a Krew plugin manifest that the checks below read.
type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		Homepage         string `json:"homepage"`
		ShortDescription string `json:"shortDescription"`
		Description      string `json:"description"`
		Platforms        []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri"`
			Sha256 string `json:"sha256"`
			Bin    string `json:"bin"`
		} `json:"platforms"`
	} `json:"spec"`
}

// TestKrewManifest keeps plugins/toolledger.yaml a well-formed Krew manifest
// whose release values are visibly templates: a checksum that looked real
// would pass for a released plugin.
func TestKrewManifest(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "plugins", "toolledger.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var plugin krewPlugin
	if err := yaml.Unmarshal(data, &plugin); err != nil {
		t.Fatalf("plugins/toolledger.yaml is not YAML: %v", err)
	}
	if plugin.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || plugin.Kind != "Plugin" || plugin.Metadata.Name != "toolledger" {
		t.Errorf("manifest is %s %s %q, want a krew v1alpha2 Plugin named toolledger", plugin.APIVersion, plugin.Kind, plugin.Metadata.Name)
	}
	if plugin.Spec.ShortDescription == "" || plugin.Spec.Description == "" || !strings.HasPrefix(plugin.Spec.Homepage, "https://") {
		t.Error("manifest needs shortDescription, description and an https homepage")
	}
	if plugin.Spec.Version != "{{ .TagName }}" {
		t.Errorf("version = %q, want the release template", plugin.Spec.Version)
	}
	realChecksum := regexp.MustCompile(`^[0-9a-fA-F]{64}$`)
	seen := map[string]bool{}
	for _, p := range plugin.Spec.Platforms {
		platform := p.Selector.MatchLabels["os"] + "/" + p.Selector.MatchLabels["arch"]
		seen[platform] = true
		if realChecksum.MatchString(p.Sha256) || !strings.Contains(p.Sha256, "filled at release") {
			t.Errorf("%s: sha256 %q must be a visible template filled at release", platform, p.Sha256)
		}
		if !strings.HasPrefix(p.URI, "https://github.com/toolledger/toolledger/releases/download/{{ .TagName }}/") {
			t.Errorf("%s: uri %q must point at the release's archive", platform, p.URI)
		}
		wantBin := "kubectl-toolledger"
		if p.Selector.MatchLabels["os"] == "windows" {
			wantBin += ".exe"
		}
		if p.Bin != wantBin {
			t.Errorf("%s: bin %q, want %q", platform, p.Bin, wantBin)
		}
	}
	for _, platform := range []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64", "windows/amd64"} {
		if !seen[platform] {
			t.Errorf("no archive for %s", platform)
		}
	}
}

// TestResolverRoleCopiesAgree keeps the chart's resolver ClusterRole granting
// what config/rbac's does: it is the role the console documents, and the
// plugin suite checks the console against config/rbac's.
func TestResolverRoleCopiesAgree(t *testing.T) {
	rules := func(path ...string) []rbacv1.PolicyRule {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(append([]string{"..", ".."}, path...)...))
		if err != nil {
			t.Fatal(err)
		}
		// The chart's metadata is a template; its rules are plain YAML.
		_, body, found := strings.Cut(string(data), "\nrules:\n")
		if !found {
			t.Fatalf("%s has no rules", filepath.Join(path...))
		}
		var out []rbacv1.PolicyRule
		if err := yaml.UnmarshalStrict([]byte(body), &out); err != nil {
			t.Fatalf("%s: %v", filepath.Join(path...), err)
		}
		return out
	}
	config := rules("config", "rbac", "toolresolution_resolver_role.yaml")
	chart := rules("charts", "toolledger", "templates", "clusterrole-resolver.yaml")
	if !reflect.DeepEqual(config, chart) {
		t.Errorf("the chart's resolver rules %+v differ from config/rbac's %+v", chart, config)
	}
}
