package chart

import (
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// TestTracingValues: without tracing.endpoint neither the manager nor the
// MCP gateway gets an OTEL_ variable or an egress to a collector; with it,
// both get the endpoint and protocol, and their NetworkPolicies (not the
// console's) admit the collector's peers on its port.
func TestTracingValues(t *testing.T) {
	base := append(slices.Clone(frontEnds), "--set", "networkPolicy.enabled=true", "--set", "networkPolicy.apiServerCIDRs={10.0.0.5/32}")
	otelEnv := func(c *corev1.Container) map[string]string {
		env := map[string]string{}
		for _, e := range c.Env {
			if strings.HasPrefix(e.Name, "OTEL_") {
				env[e.Name] = e.Value
			}
		}
		return env
	}
	collectorRule := func(np *networkingv1.NetworkPolicy) *networkingv1.NetworkPolicyEgressRule {
		for i, rule := range np.Spec.Egress {
			if len(rule.Ports) == 1 && rule.Ports[0].Port.IntValue() == 4317 {
				return &np.Spec.Egress[i]
			}
		}
		return nil
	}
	managerPolicy := chartPrefix + "egress"

	objects := decodeObjects(t, helmTemplate(t, base...))
	for _, name := range []string{monitoringName, chartPrefix + "mcp"} {
		if env := otelEnv(soleContainer(t, deployment(t, objects, name))); len(env) > 0 {
			t.Errorf("by default %s gets %v", name, env)
		}
	}
	objects = decodeObjects(t, helmTemplate(t, append(base, "--set", "tracing.endpoint=http://collector.observability:4317",
		"--set", "tracing.protocol=grpc", "--set", "tracing.networkPolicy.port=4317",
		"--set", "tracing.networkPolicy.to[0].namespaceSelector.matchLabels.team=observability")...))
	want := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector.observability:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
	for _, name := range []string{monitoringName, chartPrefix + "mcp"} {
		if env := otelEnv(soleContainer(t, deployment(t, objects, name))); !maps.Equal(env, want) {
			t.Errorf("with tracing.endpoint %s gets %v, want %v", name, env, want)
		}
	}
	for _, name := range []string{managerPolicy, gatewayPolicy} {
		rule := collectorRule(networkPolicy(t, objects, name))
		if rule == nil || len(rule.To) != 1 || rule.To[0].NamespaceSelector == nil || rule.To[0].NamespaceSelector.MatchLabels["team"] != "observability" {
			t.Errorf("%s admits no egress to the collector's peers on 4317: %+v", name, rule)
		}
	}
	if rule := collectorRule(networkPolicy(t, objects, consolePolicy)); rule != nil {
		t.Errorf("the console, which exports no spans, may reach the collector: %+v", rule)
	}
}

// TestNotificationValues: each notifications.sinks entry reaches the
// manager's --notification-sink; with a NetworkPolicy, the manager may
// reach the sinks' peers on their ports; without sinks, neither.
func TestNotificationValues(t *testing.T) {
	policy := []string{"--set", "networkPolicy.enabled=true", "--set", "networkPolicy.apiServerCIDRs={10.0.0.5/32}"}
	sinkRule := func(np *networkingv1.NetworkPolicy) *networkingv1.NetworkPolicyEgressRule {
		for i, rule := range np.Spec.Egress {
			if len(rule.Ports) == 2 && rule.Ports[0].Port.IntValue() == 8080 && rule.Ports[1].Port.IntValue() == 443 {
				return &np.Spec.Egress[i]
			}
		}
		return nil
	}
	objects := decodeObjects(t, helmTemplate(t, policy...))
	for _, arg := range managerArgs(t, objects) {
		if strings.HasPrefix(arg, "--notification-sink") {
			t.Errorf("by default the manager gets %s", arg)
		}
	}
	objects = decodeObjects(t, helmTemplate(t, append(policy,
		"--set-json", `notifications.sinks=[{"name":"broker","url":"http://broker-ingress.knative-eventing.svc/shop/default"},{"name":"audit","url":"https://relay.example.com/hooks"}]`,
		"--set", "notifications.networkPolicy.ports={8080,443}",
		"--set", "notifications.networkPolicy.to[0].namespaceSelector.matchLabels.team=eventing")...))
	wantArgs(t, managerArgs(t, objects), []string{"--notification-sink=broker=http://broker-ingress.knative-eventing.svc/shop/default",
		"--notification-sink=audit=https://relay.example.com/hooks"}, nil)
	rule := sinkRule(networkPolicy(t, objects, chartPrefix+"egress"))
	if rule == nil || len(rule.To) != 1 || rule.To[0].NamespaceSelector.MatchLabels["team"] != "eventing" {
		t.Errorf("the manager's NetworkPolicy admits no egress to the sinks' peers on 8080 and 443: %+v", rule)
	}
	if _, err := helmTemplateErr(t, "--set-json", `notifications.sinks=[{"name":"broker"}]`); err == nil || !strings.Contains(err.Error(), "notifications.sinks[].url is required") {
		t.Errorf("a sink without a URL: %v, want the chart to refuse", err)
	}
}
