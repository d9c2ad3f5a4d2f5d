package chart

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
)

const (
	gatewayName = chartPrefix + "mcp"
	consoleName = chartPrefix + "console"
)

// TestMCPGatewayRendersWhenEnabled: the MCP gateway renders only when
// enabled, requires its namespace and resourceURL, passes them and the
// authorization servers to its flags, reads the catalog of the served
// namespace only, and runs in pods of its own component, which the
// manager's selector does not match.
func TestMCPGatewayRendersWhenEnabled(t *testing.T) {
	checkNoObjectNamed(t, decodeObjects(t, helmTemplate(t)), gatewayName)

	manifests := helmTemplate(t, "--set", "mcpGateway.enabled=true", "--set", "mcpGateway.namespace=shop",
		"--set", "mcpGateway.resourceURL=https://mcp.example.com/mcp", "--set", "mcpGateway.authorizationServers={https://issuer.example.com}")
	objects := decodeObjects(t, manifests)
	gateway := deployment(t, objects, gatewayName)
	wantArgs(t, soleContainer(t, gateway).Args,
		[]string{"--namespace=shop", "--resource-url=https://mcp.example.com/mcp", "--authorization-server=https://issuer.example.com"}, nil)
	checkOwnComponent(t, objects, gateway, "mcp-gateway")

	var served []string
	for key, b := range roleBindings(t, manifests) {
		if slices.Contains(b.Subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: gatewayName, Namespace: releaseNamespace}) {
			served = append(served, key)
			if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != chartPrefix+"viewer" {
				t.Errorf("the RoleBinding %s gives the gateway the %s %s, want the ClusterRole %sviewer", key, b.RoleRef.Kind, b.RoleRef.Name, chartPrefix)
			}
		}
	}
	if want := []string{"shop/" + gatewayName}; !slices.Equal(served, want) {
		t.Errorf("the gateway is bound by the RoleBindings %v, want %v", served, want)
	}

	for _, tc := range []struct{ unset, message string }{
		{"mcpGateway.namespace", "mcpGateway.namespace is required"},
		{"mcpGateway.resourceURL", "mcpGateway.resourceURL is required"},
	} {
		args := []string{"--set", "mcpGateway.enabled=true", "--set", "mcpGateway.namespace=shop", "--set", "mcpGateway.resourceURL=https://mcp.example.com/mcp"}
		args = append(args, "--set", tc.unset+"=")
		if _, err := helmTemplateErr(t, args...); err == nil || !strings.Contains(err.Error(), tc.message) {
			t.Errorf("without %s: err = %v, want the chart to require it", tc.unset, err)
		}
	}
}

// TestConsoleRendersWhenEnabled: the web console renders only when enabled
// and requires an audience; it runs in pods of its own component, serves
// TLS from console.tlsSecret when given, and signs its forms with the key
// of console.csrfSecret, or of a Secret the chart renders and Helm keeps
// across upgrades and uninstalls.
func TestConsoleRendersWhenEnabled(t *testing.T) {
	checkNoObjectNamed(t, decodeObjects(t, helmTemplate(t)), consoleName)

	objects := decodeObjects(t, helmTemplate(t, "--set", "console.enabled=true", "--set", "console.namespace=shop", "--set", "console.tlsSecret=console-tls"))
	console := deployment(t, objects, consoleName)
	container := soleContainer(t, console)
	wantArgs(t, container.Args, []string{"--audience=toolledger-console", "--namespace=shop",
		"--tls-cert-file=/etc/toolledger-console/tls/tls.crt", "--tls-key-file=/etc/toolledger-console/tls/tls.key"}, nil)
	if probe := container.ReadinessProbe; probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Scheme != corev1.URISchemeHTTPS {
		t.Errorf("with console.tlsSecret the readiness probe is %+v, want HTTPS", probe)
	}
	checkOwnComponent(t, objects, console, "console")
	csrf := consoleName + "-csrf"
	checkSecretVolumes(t, console, map[string]string{"csrf": csrf, "tls": "console-tls"})
	if secret := find(objects, "Secret", csrf); secret == nil {
		t.Errorf("without console.csrfSecret the chart renders no Secret %s", csrf)
	} else if policy := secret.GetAnnotations()["helm.sh/resource-policy"]; policy != "keep" {
		t.Errorf("the Secret %s has helm.sh/resource-policy %q, want keep", csrf, policy)
	}

	objects = decodeObjects(t, helmTemplate(t, "--set", "console.enabled=true", "--set", "console.csrfSecret=mine"))
	console = deployment(t, objects, consoleName)
	for _, arg := range soleContainer(t, console).Args {
		if strings.HasPrefix(arg, "--tls-") {
			t.Errorf("without console.tlsSecret the console gets %s", arg)
		}
	}
	checkSecretVolumes(t, console, map[string]string{"csrf": "mine"})
	if n := count(objects, "Secret"); n != 0 {
		t.Errorf("with console.csrfSecret the chart renders %d Secrets, want none", n)
	}

	if _, err := helmTemplateErr(t, "--set", "console.enabled=true", "--set", "console.audience="); err == nil ||
		!strings.Contains(err.Error(), "console.audience is required") {
		t.Errorf("without console.audience: err = %v, want the chart to require it", err)
	}
}

// checkNoObjectNamed: no object's name starts with prefix.
func checkNoObjectNamed(t *testing.T, objects []*unstructured.Unstructured, prefix string) {
	t.Helper()
	for _, obj := range objects {
		if strings.HasPrefix(obj.GetName(), prefix) {
			t.Errorf("by default the chart renders %s %s", obj.GetKind(), obj.GetName())
		}
	}
}

// checkOwnComponent: the front end's pods carry its component label, which
// its selector requires and the manager's Deployment does not select.
func checkOwnComponent(t *testing.T, objects []*unstructured.Unstructured, frontEnd *appsv1.Deployment, component string) {
	t.Helper()
	podLabels := labels.Set(frontEnd.Spec.Template.Labels)
	if got := podLabels["app.kubernetes.io/component"]; got != component || frontEnd.Spec.Selector.MatchLabels["app.kubernetes.io/component"] != component {
		t.Errorf("%s: pods of component %q selected by %v, want component %s in both", frontEnd.Name, got, frontEnd.Spec.Selector.MatchLabels, component)
	}
	if manager := labels.SelectorFromSet(deployment(t, objects, monitoringName).Spec.Selector.MatchLabels); manager.Matches(podLabels) {
		t.Errorf("the manager's selector %s matches the pods of %s (%v)", manager, frontEnd.Name, podLabels)
	}
	// Every object of the front end is labelled its component, so that a
	// selector of the manager's objects (its Service, say) never lists it.
	for _, obj := range objects {
		if strings.HasPrefix(obj.GetName(), frontEnd.Name) {
			if got := obj.GetLabels()["app.kubernetes.io/component"]; got != component {
				t.Errorf("%s %s is labelled component %q, want %s", obj.GetKind(), obj.GetName(), got, component)
			}
		}
	}
}

// checkSecretVolumes: the Deployment's volumes are exactly these Secrets,
// by volume name.
func checkSecretVolumes(t *testing.T, d *appsv1.Deployment, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Secret == nil {
			t.Errorf("%s: the volume %s is no Secret", d.Name, v.Name)
			continue
		}
		got[v.Name] = v.Secret.SecretName
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s mounts the Secrets %v, want %v", d.Name, got, want)
	}
}

// soleContainer is the Deployment's one container.
func soleContainer(t *testing.T, d *appsv1.Deployment) *corev1.Container {
	t.Helper()
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%s has %d containers, want 1", d.Name, len(d.Spec.Template.Spec.Containers))
	}
	return &d.Spec.Template.Spec.Containers[0]
}
