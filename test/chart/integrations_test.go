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
// MCP gateway gets an OTEL_ variable or an egress to a collector, and the
// manager trusts no caller's trace context unless told to; with it,
// both get the endpoint and protocol, and their NetworkPolicies (not the
// console's) admit the collector's peers, and no one else, on its port;
// with a NetworkPolicy and no peers named the chart refuses to render,
// rather than open the port to every address.
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
	wantArgs(t, managerArgs(t, objects), []string{"--trust-caller-trace-context=false"}, nil)
	wantArgs(t, managerArgs(t, decodeObjects(t, helmTemplate(t, "--set", "tracing.trustCallerContext=true"))), []string{"--trust-caller-trace-context=true"}, nil)
	tracing := []string{"--set", "tracing.endpoint=http://collector.observability:4317", "--set", "tracing.protocol=grpc", "--set", "tracing.networkPolicy.port=4317"}
	objects = decodeObjects(t, helmTemplate(t, append(append(base, tracing...),
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

	const refused = "tracing.networkPolicy.to must name where the collector is (NetworkPolicy peers), or the NetworkPolicies would open its port to every address"
	for name, args := range map[string][]string{
		"the manager's NetworkPolicy": append(slices.Clone(tracing), "--set", "networkPolicy.enabled=true", "--set", "networkPolicy.apiServerCIDRs={10.0.0.5/32}"),
		"the gateway's NetworkPolicy": append(slices.Clone(frontEnds), tracing...),
	} {
		if _, err := helmTemplateErr(t, args...); err == nil || !strings.Contains(err.Error(), refused) {
			t.Errorf("tracing.endpoint without peers, with %s: %v, want the chart to refuse it", name, err)
		}
	}
	if _, err := helmTemplateErr(t, tracing...); err != nil {
		t.Errorf("tracing.endpoint without peers and without a NetworkPolicy: %v", err)
	}
}

// TestNotificationValues: each notifications.sinks entry names a Secret,
// mounted read-only in a directory of its own that the manager's
// --notification-sink-dir names, so that neither the sink's URL nor its
// signing key is in the pod's spec; a URL in the values is refused. With
// a NetworkPolicy the manager may reach the sinks' peers, and no one else,
// on their ports, and the chart refuses to render without peers; without
// sinks, neither flag nor egress.
func TestNotificationValues(t *testing.T) {
	policy := []string{"--set", "networkPolicy.enabled=true", "--set", "networkPolicy.apiServerCIDRs={10.0.0.5/32}"}
	sinks := []string{"--set-json", `notifications.sinks=[{"name":"broker","secretName":"sink-broker"},{"name":"audit","secretName":"sink-audit"}]`}
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
	objects = decodeObjects(t, helmTemplate(t, append(append(slices.Clone(policy), sinks...),
		"--set", "notifications.networkPolicy.ports={8080,443}",
		"--set", "notifications.networkPolicy.to[0].namespaceSelector.matchLabels.team=eventing")...))
	wantArgs(t, managerArgs(t, objects), []string{"--notification-sink-dir=broker=/var/run/toolledger/notification-sinks/broker",
		"--notification-sink-dir=audit=/var/run/toolledger/notification-sinks/audit"}, nil)
	manager := deployment(t, objects, monitoringName)
	checkSecretVolumes(t, manager, map[string]string{"notification-sink-0": "sink-broker", "notification-sink-1": "sink-audit"})
	mounts := map[string]string{}
	for _, m := range soleContainer(t, manager).VolumeMounts {
		if !m.ReadOnly {
			t.Errorf("%s is mounted writable", m.Name)
		}
		mounts[m.Name] = m.MountPath
	}
	if want := map[string]string{"notification-sink-0": "/var/run/toolledger/notification-sinks/broker",
		"notification-sink-1": "/var/run/toolledger/notification-sinks/audit"}; !maps.Equal(mounts, want) {
		t.Errorf("the manager mounts %v, want %v", mounts, want)
	}
	rule := sinkRule(networkPolicy(t, objects, chartPrefix+"egress"))
	if rule == nil || len(rule.To) != 1 || rule.To[0].NamespaceSelector.MatchLabels["team"] != "eventing" {
		t.Errorf("the manager's NetworkPolicy admits no egress to the sinks' peers on 8080 and 443: %+v", rule)
	}

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a sink without a Secret", []string{"--set-json", `notifications.sinks=[{"name":"broker"}]`}, "notifications.sinks[].secretName is required"},
		{"a sink's URL in the values", []string{"--set-json", `notifications.sinks=[{"name":"broker","url":"https://relay.example.com/hooks?token=t"}]`},
			"notifications.sinks: broker has a url, which would be in the pod's args: put it in a Secret under the key url (and the signing key under signing-key), and name the Secret in secretName"},
		{"sinks without peers", append(slices.Clone(policy), sinks...),
			"notifications.networkPolicy.to must name where the notification sinks are (NetworkPolicy peers), or the manager's NetworkPolicy would open their ports to every address"},
	} {
		if _, err := helmTemplateErr(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want the chart to refuse it: %s", tc.name, err, tc.want)
		}
	}
}
