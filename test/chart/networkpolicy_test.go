package chart

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
)

// frontEnds renders both front ends.
var frontEnds = []string{"--set", "mcpGateway.enabled=true", "--set", "mcpGateway.namespace=shop",
	"--set", "mcpGateway.resourceURL=https://mcp.example.com/mcp", "--set", "console.enabled=true"}

const (
	gatewayPolicy = chartPrefix + "mcp"
	consolePolicy = chartPrefix + "console"
)

// TestFrontEndNetworkPolicies: each front end that renders gets a
// NetworkPolicy by default, selecting its pods (its Deployment's template
// labels), admitting ingress on its port only and egress to DNS and the
// API server's ports only, or its CIDRs when networkPolicy.apiServerCIDRs
// names them; a value turns each off.
func TestFrontEndNetworkPolicies(t *testing.T) {
	objects := decodeObjects(t, helmTemplate(t, frontEnds...))
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	dns := networkingv1.NetworkPolicyEgressRule{
		To: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
		}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: port(53)}, {Protocol: &tcp, Port: port(53)}},
	}
	apiServer := networkingv1.NetworkPolicyEgressRule{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: port(443)}, {Protocol: &tcp, Port: port(6443)}}}
	for _, tc := range []struct {
		policy, deployment string
		port               int
	}{{gatewayPolicy, chartPrefix + "mcp", 8090}, {consolePolicy, chartPrefix + "console", 8087}} {
		policy := networkPolicy(t, objects, tc.policy)
		want := networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: templateLabels(t, find(objects, "Deployment", tc.deployment))},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: port(tc.port)}}}},
			Egress:      []networkingv1.NetworkPolicyEgressRule{dns, apiServer},
		}
		if diff := cmp.Diff(want, policy.Spec); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.policy, diff)
		}
	}

	narrowed := decodeObjects(t, helmTemplate(t, append(slices.Clone(frontEnds),
		"--set", "networkPolicy.apiServerCIDRs={10.0.0.1/32}", "--set", "frontEndNetworkPolicy.apiServerPorts={6443}",
		"--set-json", `console.networkPolicy.from=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"ingress"}}}]`)...))
	console := networkPolicy(t, narrowed, consolePolicy)
	wantEgress := networkingv1.NetworkPolicyEgressRule{
		To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.1/32"}}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: port(6443)}},
	}
	if diff := cmp.Diff(wantEgress, console.Spec.Egress[1]); diff != "" {
		t.Errorf("the API server egress with apiServerCIDRs (-want +got):\n%s", diff)
	}
	wantFrom := []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "ingress"}}}}
	if diff := cmp.Diff(wantFrom, console.Spec.Ingress[0].From); diff != "" {
		t.Errorf("the console's ingress peers (-want +got):\n%s", diff)
	}

	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"defaults, no front end", nil, nil},
		{"gateway's policy off", append(slices.Clone(frontEnds), "--set", "mcpGateway.networkPolicy.enabled=false"), []string{consolePolicy}},
		{"console's policy off", append(slices.Clone(frontEnds), "--set", "console.networkPolicy.enabled=false"), []string{gatewayPolicy}},
	} {
		var got []string
		for _, obj := range decodeObjects(t, helmTemplate(t, tc.args...)) {
			if obj.GetKind() == "NetworkPolicy" {
				got = append(got, obj.GetName())
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: NetworkPolicies %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestFrontEndNetworkPoliciesAcceptedByAPIServer: both policies, in both
// shapes, and the manager's with the notification sinks' and the
// collector's peers, pass the API server's validation (a dry run).
func TestFrontEndNetworkPoliciesAcceptedByAPIServer(t *testing.T) {
	cfg, warnings := startAPIServer(t)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	createNamespace(t, dyn, releaseNamespace)
	policies := dyn.Resource(schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"}).Namespace(releaseNamespace)
	peers := `[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"observability"}}},{"ipBlock":{"cidr":"203.0.113.0/24"}}]`
	withPeers := append(slices.Clone(frontEnds), "--set", "networkPolicy.enabled=true", "--set", "networkPolicy.apiServerCIDRs={10.0.0.1/32}",
		"--set-json", `notifications.sinks=[{"name":"broker","secretName":"sink-broker"}]`, "--set-json", "notifications.networkPolicy.to="+peers,
		"--set", "tracing.endpoint=http://collector.observability:4318", "--set-json", "tracing.networkPolicy.to="+peers)
	for _, args := range [][]string{frontEnds, append(slices.Clone(frontEnds), "--set", "networkPolicy.apiServerCIDRs={10.0.0.1/32}"), withPeers} {
		for _, obj := range decodeObjects(t, helmTemplate(t, args...)) {
			if obj.GetKind() != "NetworkPolicy" {
				continue
			}
			body, err := json.Marshal(obj.Object)
			if err != nil {
				t.Fatal(err)
			}
			before := warnings.count()
			if _, err := policies.Patch(t.Context(), obj.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{
				DryRun: []string{metav1.DryRunAll}, FieldManager: "helm", FieldValidation: metav1.FieldValidationStrict,
			}); err != nil {
				t.Errorf("the API server refuses %s: %v", obj.GetName(), err)
			}
			if w := warnings.since(before); len(w) > 0 {
				t.Errorf("the API server warns of %s: %v", obj.GetName(), w)
			}
		}
	}
}

// TestManagerEgressNetworkPolicy: networkPolicy.enabled renders a
// NetworkPolicy selecting the manager's pods (its Deployment's selector)
// that lets them reach DNS, the API server at networkPolicy.apiServerCIDRs
// and public addresses only; without those CIDRs the chart refuses to
// render.
func TestManagerEgressNetworkPolicy(t *testing.T) {
	objects := decodeObjects(t, helmTemplate(t, "--set", "networkPolicy.enabled=true", "--set", "networkPolicy.apiServerCIDRs={10.0.0.5/32}"))
	policy := networkPolicy(t, objects, chartPrefix+"egress")
	if policy.Namespace != releaseNamespace {
		t.Errorf("%s is in namespace %q, want %q", policy.Name, policy.Namespace, releaseNamespace)
	}
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	want := networkingv1.NetworkPolicySpec{
		PodSelector: *deployment(t, objects, monitoringName).Spec.Selector,
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
		Egress: []networkingv1.NetworkPolicyEgressRule{
			{
				To: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}},
					PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
				}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: port(53)}, {Protocol: &tcp, Port: port(53)}},
			},
			{
				To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.5/32"}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: port(6443)}},
			},
			{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0",
				Except: []string{"10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16"}}}}},
		},
	}
	if diff := cmp.Diff(want, policy.Spec); diff != "" {
		t.Errorf("%s (-want +got):\n%s", policy.Name, diff)
	}
	if n := count(objects, "NetworkPolicy"); n != 1 {
		t.Errorf("%d NetworkPolicies rendered, want the manager's only", n)
	}
	if _, err := helmTemplateErr(t, "--set", "networkPolicy.enabled=true"); err == nil ||
		!strings.Contains(err.Error(), "networkPolicy.apiServerCIDRs must list the API server's endpoint addresses") {
		t.Errorf("networkPolicy.enabled without apiServerCIDRs: err = %v, want the chart to refuse it", err)
	}
}

func networkPolicy(t *testing.T, objects []*unstructured.Unstructured, name string) *networkingv1.NetworkPolicy {
	t.Helper()
	obj := find(objects, "NetworkPolicy", name)
	if obj == nil {
		t.Fatalf("no NetworkPolicy %s", name)
	}
	var policy networkingv1.NetworkPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &policy); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return &policy
}

func templateLabels(t *testing.T, deployment *unstructured.Unstructured) map[string]string {
	t.Helper()
	if deployment == nil {
		t.Fatal("no Deployment")
	}
	labels, _, err := unstructured.NestedStringMap(deployment.Object, "spec", "template", "metadata", "labels")
	if err != nil || len(labels) == 0 {
		t.Fatalf("%s: no template labels: %v", deployment.GetName(), err)
	}
	return labels
}

func port(p int) *intstr.IntOrString {
	v := intstr.FromInt32(int32(p))
	return &v
}

// TestFrontEndRateLimitValues: the per-client rate limit values reach both
// front ends' flags.
func TestFrontEndRateLimitValues(t *testing.T) {
	objects := decodeObjects(t, helmTemplate(t, append(slices.Clone(frontEnds), "--set", "console.rateLimit=5", "--set", "mcpGateway.rateLimitBurst=7")...))
	for _, tc := range []struct {
		deployment string
		want       []string
	}{
		{chartPrefix + "mcp", []string{"--rate-limit=20", "--rate-limit-burst=7"}},
		{chartPrefix + "console", []string{"--rate-limit=5", "--rate-limit-burst=40"}},
	} {
		deployment := find(objects, "Deployment", tc.deployment)
		if deployment == nil {
			t.Fatalf("no Deployment %s", tc.deployment)
		}
		containers, _, _ := unstructured.NestedSlice(deployment.Object, "spec", "template", "spec", "containers")
		if len(containers) != 1 {
			t.Fatalf("%s: %d containers", tc.deployment, len(containers))
		}
		args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
		for _, arg := range tc.want {
			if !slices.Contains(args, arg) {
				t.Errorf("%s: args %v lack %s", tc.deployment, args, arg)
			}
		}
	}
}
