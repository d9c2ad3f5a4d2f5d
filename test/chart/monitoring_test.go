package chart

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"
)

// The names the chart gives the release's monitoring objects.
const (
	releaseNamespace = "toolledger-system"
	metricsService   = chartPrefix + "metrics"
	metricsReader    = chartPrefix + "metrics-reader"
	dashboardName    = chartPrefix + "dashboard"
	monitoringName   = release + "-toolledger"
	// The scraping Prometheus' own ServiceAccount token.
	prometheusToken = "/var/run/secrets/kubernetes.io/serviceaccount/token"
)

// monitoringCase is one set of values and what the chart must render with it.
type monitoringCase struct {
	name string
	args []string
	// The objects that render only when asked for.
	serviceMonitor, prometheusRule, dashboard bool
	// metrics.reader.subjects, bound to the reader ClusterRole when any.
	readerSubjects []rbacv1.Subject
	// The labels metrics.serviceMonitor.labels and
	// metrics.prometheusRule.labels add to their objects.
	labels map[string]string
	// metrics.enabled, metrics.secure and metrics.certSecret.
	metricsOff bool
	insecure   bool
	certSecret string
	// The dashboard ConfigMap's namespace, when not the release's.
	dashboardNamespace string
}

var monitoringCases = []monitoringCase{
	{name: "defaults"},
	{name: "metrics off", args: []string{"--set", "metrics.enabled=false"}, metricsOff: true},
	{name: "serviceMonitor", serviceMonitor: true, labels: map[string]string{"release": "kube-prometheus-stack"}, args: []string{
		"--set", "metrics.serviceMonitor.enabled=true",
		"--set", "metrics.serviceMonitor.labels.release=kube-prometheus-stack",
		"--set", "metrics.serviceMonitor.interval=15s", "--set", "metrics.serviceMonitor.scrapeTimeout=10s",
		"--set-json", `metrics.serviceMonitor.relabelings=[{"action":"replace","sourceLabels":["__meta_kubernetes_pod_node_name"],"targetLabel":"node"}]`,
		"--set-json", `metrics.serviceMonitor.metricRelabelings=[{"action":"drop","sourceLabels":["__name__"],"regex":"go_gc_.*"}]`,
	}},
	{name: "serviceMonitor with certSecret", serviceMonitor: true, certSecret: "toolledger-metrics-tls", args: []string{
		"--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.certSecret=toolledger-metrics-tls",
	}},
	{name: "prometheusRule", prometheusRule: true, labels: map[string]string{"release": "kube-prometheus-stack"}, args: []string{
		"--set", "metrics.prometheusRule.enabled=true", "--set", "metrics.prometheusRule.labels.release=kube-prometheus-stack",
	}},
	{name: "dashboard", dashboard: true, dashboardNamespace: "grafana", args: []string{
		"--set", "metrics.dashboard.enabled=true", "--set", "metrics.dashboard.namespace=grafana",
		"--set", "metrics.dashboard.annotations.grafana_folder=toolledger",
	}},
	{name: "insecure", insecure: true, serviceMonitor: true, args: []string{
		"--set", "metrics.secure=false", "--set", "metrics.serviceMonitor.enabled=true",
	}},
	{name: "reader subjects", readerSubjects: []rbacv1.Subject{
		{Kind: rbacv1.ServiceAccountKind, Name: "prometheus-k8s", Namespace: "monitoring"},
		{Kind: rbacv1.GroupKind, Name: "ops", APIGroup: rbacv1.GroupName},
	}, args: []string{
		"--set-json", `metrics.reader.subjects=[{"kind":"ServiceAccount","name":"prometheus-k8s","namespace":"monitoring"},{"kind":"Group","name":"ops","apiGroup":"rbac.authorization.k8s.io"}]`,
	}},
	{name: "everything", serviceMonitor: true, prometheusRule: true, dashboard: true, certSecret: "toolledger-metrics-tls",
		readerSubjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "prometheus-k8s", Namespace: "monitoring"}}, args: []string{
			"--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.prometheusRule.enabled=true",
			"--set", "metrics.dashboard.enabled=true", "--set", "metrics.certSecret=toolledger-metrics-tls",
			"--set-json", `metrics.reader.subjects=[{"kind":"ServiceAccount","name":"prometheus-k8s","namespace":"monitoring"}]`,
			"--set", "kubernetesApply.namespaces={shop}", "--set-json", `clusterToolReaders=[{"kind":"Group","name":"ops","apiGroup":"rbac.authorization.k8s.io"}]`,
		}},
}

// TestMonitoringToggles: each monitoring object renders only when its value
// asks for it, once, with the labels of the values; the reader binding
// binds the subjects of the values; and the metrics values reach the
// manager's flags, the Service and the ServiceMonitor.
func TestMonitoringToggles(t *testing.T) {
	for _, tc := range monitoringCases {
		t.Run(tc.name, func(t *testing.T) {
			objects := decodeObjects(t, helmTemplate(t, tc.args...))
			check := func(kind, name string, want bool) *unstructured.Unstructured {
				t.Helper()
				found := find(objects, kind, name)
				if want && found == nil {
					t.Errorf("no %s %s rendered", kind, name)
				}
				if !want && found != nil {
					t.Errorf("%s %s rendered, though not asked for", kind, name)
				}
				return found
			}
			for kind, asked := range map[string]bool{"ServiceMonitor": tc.serviceMonitor, "PrometheusRule": tc.prometheusRule, "ConfigMap": tc.dashboard} {
				if n := count(objects, kind); (asked && n != 1) || (!asked && n != 0) {
					t.Errorf("%d objects of kind %s rendered, want one if asked for, else none", n, kind)
				}
			}
			serviceMonitor := check("ServiceMonitor", monitoringName, tc.serviceMonitor)
			rule := check("PrometheusRule", monitoringName, tc.prometheusRule)
			dashboard := check("ConfigMap", dashboardName, tc.dashboard)
			binding := check("ClusterRoleBinding", metricsReader, len(tc.readerSubjects) > 0)
			check("ClusterRole", metricsReader, true)
			service := check("Service", metricsService, !tc.metricsOff)

			args := managerArgs(t, objects)
			switch {
			case tc.metricsOff:
				wantArgs(t, args, []string{"--metrics-bind-address=0"}, []string{"--metrics-secure=true", "--metrics-secure=false"})
			case tc.insecure:
				wantArgs(t, args, []string{"--metrics-bind-address=:8443", "--metrics-secure=false"}, []string{"--metrics-secure=true"})
			default:
				wantArgs(t, args, []string{"--metrics-bind-address=:8443", "--metrics-secure=true"}, []string{"--metrics-secure=false"})
			}
			checkCertSecret(t, objects, args, tc.certSecret)

			if service != nil {
				if port := servicePort(t, service); fmt.Sprint(port["port"]) != "8443" || port["targetPort"] != "metrics" {
					t.Errorf("the metrics Service's port is %v, want 8443 to the container port metrics", port)
				}
			}
			if serviceMonitor != nil {
				checkServiceMonitor(t, serviceMonitor, service, tc)
			}
			if dashboard != nil {
				labels := dashboard.GetLabels()
				if labels["grafana_dashboard"] != "1" {
					t.Errorf("the dashboard ConfigMap has the labels %v, want grafana_dashboard: \"1\" for Grafana's sidecar", labels)
				}
				want := cmp.Or(tc.dashboardNamespace, releaseNamespace)
				if dashboard.GetNamespace() != want {
					t.Errorf("the dashboard ConfigMap is in namespace %q, want %q", dashboard.GetNamespace(), want)
				}
			}
			for _, obj := range []*unstructured.Unstructured{serviceMonitor, rule} {
				if obj == nil {
					continue
				}
				for k, v := range tc.labels {
					if obj.GetLabels()[k] != v {
						t.Errorf("the %s has the labels %v, want %s: %s of the values", obj.GetKind(), obj.GetLabels(), k, v)
					}
				}
			}
			if binding != nil {
				checkReaderBinding(t, binding, tc.readerSubjects)
			}
		})
	}
	// A monitoring object without the metrics endpoint would watch nothing.
	for _, value := range []string{"serviceMonitor", "prometheusRule", "dashboard"} {
		if out, err := helmTemplateErr(t, "--set", "metrics.enabled=false", "--set", "metrics."+value+".enabled=true"); err == nil {
			t.Errorf("metrics.%s.enabled=true rendered with metrics.enabled=false:\n%s", value, out)
		}
	}
	// The dashboard label and its value are configurable.
	objects := decodeObjects(t, helmTemplate(t, "--set", "metrics.dashboard.enabled=true",
		"--set", "metrics.dashboard.label=dashboards", "--set", "metrics.dashboard.labelValue=toolledger"))
	if cm := find(objects, "ConfigMap", dashboardName); cm == nil || cm.GetLabels()["dashboards"] != "toolledger" || cm.GetLabels()["grafana_dashboard"] != "" {
		t.Errorf("with metrics.dashboard.label=dashboards and labelValue=toolledger the ConfigMap is %v", cm)
	}
}

// checkReaderBinding: the binding gives the reader ClusterRole to the
// subjects of metrics.reader.subjects, and to no other.
func checkReaderBinding(t *testing.T, binding *unstructured.Unstructured, subjects []rbacv1.Subject) {
	t.Helper()
	var b rbacv1.ClusterRoleBinding
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(binding.Object, &b); err != nil {
		t.Fatalf("%s: %v", binding.GetName(), err)
	}
	want := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: metricsReader}
	if b.RoleRef != want || !reflect.DeepEqual(b.Subjects, subjects) {
		t.Errorf("%s binds %+v to %+v, want %+v to %+v", b.Name, b.RoleRef, b.Subjects, want, subjects)
	}
}

// checkServiceMonitor: the ServiceMonitor selects the metrics Service and
// its port in the release namespace, keeps the metrics' namespace label,
// and scrapes HTTPS with the Prometheus' own token, trusting only the CA of
// metrics.certSecret when there is one.
func checkServiceMonitor(t *testing.T, sm, service *unstructured.Unstructured, tc monitoringCase) {
	t.Helper()
	selector, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	if len(selector) == 0 {
		t.Errorf("the ServiceMonitor has no selector")
	}
	for k, v := range selector {
		if service.GetLabels()[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%s, which the metrics Service does not carry (%v)", k, v, service.GetLabels())
		}
	}
	if names, _, _ := unstructured.NestedStringSlice(sm.Object, "spec", "namespaceSelector", "matchNames"); !reflect.DeepEqual(names, []string{releaseNamespace}) {
		t.Errorf("the ServiceMonitor looks in the namespaces %v, want [%s]", names, releaseNamespace)
	}
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(endpoints) != 1 {
		t.Fatalf("the ServiceMonitor has %d endpoints, want 1", len(endpoints))
	}
	endpoint := endpoints[0].(map[string]any)
	get := func(path ...string) any {
		v, _, _ := unstructured.NestedFieldNoCopy(endpoint, path...)
		return v
	}
	if get("port") != servicePort(t, service)["name"] || get("path") != "/metrics" || get("honorLabels") != true {
		t.Errorf("the ServiceMonitor's endpoint scrapes port %v path %v with honorLabels %v, want the Service's port, /metrics and true",
			get("port"), get("path"), get("honorLabels"))
	}
	if v := get("interval"); tc.name == "serviceMonitor" && (v != "15s" || get("scrapeTimeout") != "10s" || get("relabelings") == nil || get("metricRelabelings") == nil) {
		t.Errorf("the ServiceMonitor's interval, scrapeTimeout and relabelings are not the values': %v", endpoint)
	}
	if tc.insecure {
		if get("scheme") != "http" || get("bearerTokenFile") != nil || get("tlsConfig") != nil {
			t.Errorf("with metrics.secure=false the ServiceMonitor must scrape plain HTTP without a token, got %v", endpoint)
		}
		return
	}
	if get("scheme") != "https" || get("bearerTokenFile") != prometheusToken {
		t.Errorf("the ServiceMonitor scrapes %v with the token %v, want https with %s", get("scheme"), get("bearerTokenFile"), prometheusToken)
	}
	if tc.certSecret == "" {
		if get("tlsConfig", "insecureSkipVerify") != true || get("tlsConfig", "ca") != nil {
			t.Errorf("against the self-signed certificate the ServiceMonitor must skip verification, got tlsConfig %v", get("tlsConfig"))
		}
		return
	}
	if get("tlsConfig", "insecureSkipVerify") != nil || get("tlsConfig", "ca", "secret", "name") != tc.certSecret ||
		get("tlsConfig", "ca", "secret", "key") != "ca.crt" || get("tlsConfig", "serverName") != metricsService+"."+releaseNamespace+".svc" {
		t.Errorf("with metrics.certSecret the ServiceMonitor must verify against the Secret's ca.crt and the Service's name, got tlsConfig %v", get("tlsConfig"))
	}
}

// checkCertSecret: metrics.certSecret is mounted where --metrics-cert-dir
// points, and nothing is mounted without it.
func checkCertSecret(t *testing.T, objects []*unstructured.Unstructured, args []string, secret string) {
	t.Helper()
	deployment := find(objects, "Deployment", monitoringName)
	volumes, _, _ := unstructured.NestedSlice(deployment.Object, "spec", "template", "spec", "volumes")
	containers, _, _ := unstructured.NestedSlice(deployment.Object, "spec", "template", "spec", "containers")
	mounts, _, _ := unstructured.NestedSlice(containers[0].(map[string]any), "volumeMounts")
	var dir string
	for _, arg := range args {
		if d, ok := strings.CutPrefix(arg, "--metrics-cert-dir="); ok {
			dir = d
		}
	}
	if secret == "" {
		if dir != "" || len(volumes) != 0 || len(mounts) != 0 {
			t.Errorf("without metrics.certSecret the manager gets --metrics-cert-dir=%q, volumes %v and mounts %v", dir, volumes, mounts)
		}
		return
	}
	if len(volumes) != 1 || len(mounts) != 1 {
		t.Fatalf("with metrics.certSecret the manager has volumes %v and mounts %v, want one of each", volumes, mounts)
	}
	volume, mount := volumes[0].(map[string]any), mounts[0].(map[string]any)
	name, _, _ := unstructured.NestedString(volume, "secret", "secretName")
	if dir == "" || name != secret || mount["mountPath"] != dir || mount["name"] != volume["name"] || mount["readOnly"] != true {
		t.Errorf("metrics.certSecret=%s: --metrics-cert-dir=%q, volume %v, mount %v; want the Secret mounted read-only at the flag's folder", secret, dir, volume, mount)
	}
}

// TestPrometheusRuleIsTheAlerts: the PrometheusRule carries exactly the
// groups of config/prometheus/alerts.yaml, so the chart's copy is current.
func TestPrometheusRuleIsTheAlerts(t *testing.T) {
	content, err := os.ReadFile(filepath.Join(repoRoot, "config", "prometheus", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := yaml.Unmarshal(content, &want); err != nil {
		t.Fatalf("config/prometheus/alerts.yaml: %v", err)
	}
	if groups, _ := want["groups"].([]any); len(groups) == 0 {
		t.Fatal("config/prometheus/alerts.yaml has no groups")
	}
	rule := find(decodeObjects(t, helmTemplate(t, "--set", "metrics.prometheusRule.enabled=true")), "PrometheusRule", monitoringName)
	if rule == nil {
		t.Fatal("metrics.prometheusRule.enabled=true renders no PrometheusRule")
	}
	spec, _, _ := unstructured.NestedMap(rule.Object, "spec")
	if !reflect.DeepEqual(spec, map[string]any{"groups": want["groups"]}) {
		got, _ := yaml.Marshal(spec)
		t.Errorf("the PrometheusRule's spec is not the groups of config/prometheus/alerts.yaml (run `make generate`):\n%s", got)
	}
}

// TestDashboardIsTheDashboard: the ConfigMap's toolledger.json is
// config/grafana/toolledger.json.
func TestDashboardIsTheDashboard(t *testing.T) {
	want, err := os.ReadFile(filepath.Join(repoRoot, "config", "grafana", "toolledger.json"))
	if err != nil {
		t.Fatal(err)
	}
	cm := find(decodeObjects(t, helmTemplate(t, "--set", "metrics.dashboard.enabled=true")), "ConfigMap", dashboardName)
	if cm == nil {
		t.Fatal("metrics.dashboard.enabled=true renders no dashboard ConfigMap")
	}
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	if len(data) != 1 {
		t.Errorf("the dashboard ConfigMap has the keys %v, want toolledger.json only", slices.Sorted(func(yield func(string) bool) {
			for k := range data {
				if !yield(k) {
					return
				}
			}
		}))
	}
	got := data["toolledger.json"]
	var gotJSON, wantJSON any
	if err := json.Unmarshal([]byte(got), &gotJSON); err != nil {
		t.Fatalf("the ConfigMap's toolledger.json is no JSON: %v", err)
	}
	if err := json.Unmarshal(want, &wantJSON); err != nil {
		t.Fatalf("config/grafana/toolledger.json: %v", err)
	}
	if !reflect.DeepEqual(gotJSON, wantJSON) {
		t.Error("the ConfigMap's toolledger.json is not config/grafana/toolledger.json (run `make generate`)")
	} else if strings.TrimRight(got, "\n") != strings.TrimRight(string(want), "\n") {
		t.Error("the ConfigMap's toolledger.json has the content of config/grafana/toolledger.json but not its text")
	}
}

// TestMonitoringAcceptedByAPIServer: every object the chart renders, with
// each of the monitoring cases, is accepted by a real kube-apiserver, with
// the Prometheus Operator's CRDs of testdata/, in a server-side apply dry
// run with strict field validation and no warning.
func TestMonitoringAcceptedByAPIServer(t *testing.T) {
	cfg, warnings := startAPIServer(t)
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Render the admission policies where this API server serves them, as
	// Helm would.
	var apiVersions []string
	for _, kind := range []string{"MutatingAdmissionPolicy", "ValidatingAdmissionPolicy"} {
		if _, err := mapper.RESTMapping(schema.GroupKind{Group: "admissionregistration.k8s.io", Kind: kind}, "v1"); err == nil {
			apiVersions = append(apiVersions, "--api-versions", "admissionregistration.k8s.io/v1/"+kind)
		}
	}
	t.Logf("rendering with %v", apiVersions)
	namespaces := map[string]bool{}
	for _, tc := range monitoringCases {
		t.Run(tc.name, func(t *testing.T) {
			objects := decodeObjects(t, helmTemplate(t, append(slices.Clone(tc.args), apiVersions...)...))
			for _, obj := range objects {
				mapping, err := mapper.RESTMapping(obj.GroupVersionKind().GroupKind(), obj.GroupVersionKind().Version)
				if err != nil {
					t.Errorf("%s %s: the API server does not serve it: %v", obj.GetKind(), obj.GetName(), err)
					continue
				}
				var resource dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
				if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
					if obj.GetNamespace() == "" {
						obj.SetNamespace(releaseNamespace) // where Helm puts it
					}
					ns := obj.GetNamespace()
					if !namespaces[ns] {
						createNamespace(t, dyn, ns)
						namespaces[ns] = true
					}
					resource = dyn.Resource(mapping.Resource).Namespace(ns)
				}
				body, err := json.Marshal(obj.Object)
				if err != nil {
					t.Fatal(err)
				}
				force := true
				before := warnings.count()
				_, err = resource.Patch(t.Context(), obj.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{
					DryRun: []string{metav1.DryRunAll}, FieldManager: "helm", FieldValidation: metav1.FieldValidationStrict, Force: &force,
				})
				if err != nil {
					t.Errorf("the API server refuses %s %s/%s: %v", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
				}
				if w := warnings.since(before); len(w) > 0 {
					t.Errorf("the API server warns of %s %s/%s: %v", obj.GetKind(), obj.GetNamespace(), obj.GetName(), w)
				}
			}
			kinds := map[string]int{}
			for _, obj := range objects {
				kinds[obj.GetKind()]++
			}
			t.Logf("%d objects applied in a dry run: %v", len(objects), kinds)
			for _, kind := range []string{"ServiceMonitor", "PrometheusRule"} {
				if want := map[string]bool{"ServiceMonitor": tc.serviceMonitor, "PrometheusRule": tc.prometheusRule}[kind]; want && count(objects, kind) == 0 {
					t.Errorf("no %s was rendered to be checked", kind)
				}
			}
		})
	}
	// The dry runs stored nothing: only the namespaces exist.
	for _, gvr := range []string{"servicemonitors", "prometheusrules"} {
		list, err := dyn.Resource(schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: gvr}).List(t.Context(), metav1.ListOptions{})
		if err != nil || len(list.Items) != 0 {
			t.Errorf("%s after the dry runs: %v, %v", gvr, list, err)
		}
	}
}

// startAPIServer starts kube-apiserver and etcd from KUBEBUILDER_ASSETS
// (bin/, which `make test` fills) with toolledger's CRDs and the Prometheus
// Operator's of testdata/, stopped when the test ends.
func startAPIServer(t *testing.T) (*rest.Config, *warningRecorder) {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(repoRoot, "bin")
	}
	for _, binary := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, binary)); err != nil {
			t.Fatalf("no %s in %s: `make test` builds it (`make controlplane`)", binary, assets)
		}
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(repoRoot, "config", "crd", "bases"), "testdata"},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop()
		t.Fatalf("cannot start the control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("cannot stop the control plane: %v", err)
		}
	})
	if len(env.CRDs) < 8 {
		t.Fatalf("envtest installed %d CRDs, want toolledger's and the two of testdata/", len(env.CRDs))
	}
	warnings := &warningRecorder{}
	cfg = rest.CopyConfig(cfg)
	cfg.WarningHandler = warnings
	return cfg, warnings
}

func createNamespace(t *testing.T, dyn dynamic.Interface, name string) {
	t.Helper()
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name}}}
	_, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(t.Context(), ns, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("cannot create namespace %s: %v", name, err)
	}
}

// warningRecorder keeps the API server's warnings.
type warningRecorder struct {
	mu       sync.Mutex
	warnings []string
}

func (w *warningRecorder) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.warnings = append(w.warnings, text)
}

func (w *warningRecorder) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.warnings)
}

func (w *warningRecorder) since(n int) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.warnings[n:])
}

// helmTemplateErr renders the chart like helmTemplate, returning the error
// instead of failing.
func helmTemplateErr(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	helm := filepath.Join(repoRoot, "bin", "helm")
	if _, err := os.Stat(helm); err != nil {
		t.Fatalf("no %s: `make test` builds it", helm)
	}
	return execOutput(t, helm, append([]string{"template", release, filepath.Join(repoRoot, "charts", "toolledger"),
		"--namespace", releaseNamespace}, args...)...)
}

// decodeObjects decodes every object of a multi-document YAML stream.
func decodeObjects(t *testing.T, manifests []byte) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifests)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		if len(obj.Object) > 0 {
			out = append(out, obj)
		}
	}
}

func find(objects []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, obj := range objects {
		if obj.GetKind() == kind && obj.GetName() == name {
			return obj
		}
	}
	return nil
}

func count(objects []*unstructured.Unstructured, kind string) int {
	n := 0
	for _, obj := range objects {
		if obj.GetKind() == kind {
			n++
		}
	}
	return n
}

// managerArgs are the manager container's arguments.
func managerArgs(t *testing.T, objects []*unstructured.Unstructured) []string {
	t.Helper()
	deployment := find(objects, "Deployment", monitoringName)
	if deployment == nil {
		t.Fatalf("no Deployment %s rendered", monitoringName)
	}
	containers, _, _ := unstructured.NestedSlice(deployment.Object, "spec", "template", "spec", "containers")
	for _, c := range containers {
		container := c.(map[string]any)
		if container["name"] == "manager" {
			args, _, _ := unstructured.NestedStringSlice(container, "args")
			return args
		}
	}
	t.Fatal("the Deployment has no manager container")
	return nil
}

func wantArgs(t *testing.T, args, want, notWant []string) {
	t.Helper()
	for _, w := range want {
		if !slices.Contains(args, w) {
			t.Errorf("the args %v lack %s", args, w)
		}
	}
	for _, w := range notWant {
		if slices.Contains(args, w) {
			t.Errorf("the args %v hold %s", args, w)
		}
	}
}

// servicePort is the metrics Service's one port.
func servicePort(t *testing.T, service *unstructured.Unstructured) map[string]any {
	t.Helper()
	ports, _, _ := unstructured.NestedSlice(service.Object, "spec", "ports")
	if len(ports) != 1 {
		t.Fatalf("the metrics Service has the ports %v, want one", ports)
	}
	return ports[0].(map[string]any)
}

func execOutput(t *testing.T, name string, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%w: %s", err, stderr.String())
	}
	return out, nil
}
