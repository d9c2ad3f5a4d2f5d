// Package observability checks what operators are given to watch toolledger
// with: the Prometheus alerting rules (config/prometheus, with promtool), the
// Grafana dashboard (config/grafana) and their runbook (docs/operations.md).
// Every metric they query must be one the manager or the SDK really exports,
// which is read from the code's own collectors rather than from a list.
package observability

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/toolledger/toolledger/controllers"
	"github.com/toolledger/toolledger/pkg/sdk"
)

// repoRoot is the repository, seen from this package's directory, where go
// test runs the tests.
var repoRoot = filepath.Join("..", "..")

// exportedMetric is one metric family a collector describes: its name and
// its variable label names.
type exportedMetric struct {
	Name   string
	Labels []string
	// From says who exports it: "manager" or "sdk".
	From string
}

var (
	fqNamePattern         = regexp.MustCompile(`fqName: "((?:[^"\\]|\\.)*)"`)
	variableLabelsPattern = regexp.MustCompile(`variableLabels: \{([^}]*)\}\}$`)
)

// describe returns the metrics that collectors describe, read from each
// Desc's String (client_golang exposes no accessor for the name).
func describe(t *testing.T, from string, collectors []prometheus.Collector) []exportedMetric {
	t.Helper()
	var out []exportedMetric
	for _, c := range collectors {
		ch := make(chan *prometheus.Desc)
		go func() {
			c.Describe(ch)
			close(ch)
		}()
		for d := range ch {
			s := d.String()
			name := fqNamePattern.FindStringSubmatch(s)
			if name == nil {
				t.Fatalf("cannot read the metric name from %s", s)
			}
			var labels []string
			if m := variableLabelsPattern.FindStringSubmatch(s); m != nil && m[1] != "" {
				for _, l := range strings.Split(m[1], ",") {
					// A constrained label prints as c(name).
					labels = append(labels, strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"))
				}
			}
			out = append(out, exportedMetric{Name: name[1], Labels: labels, From: from})
		}
	}
	return out
}

// recordingRegisterer is a Registerer that keeps what is registered on it,
// so that the test sees the SDK's collectors.
type recordingRegisterer struct {
	prometheus.Registerer
	mu         sync.Mutex
	collectors []prometheus.Collector
}

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	if err := r.Registerer.Register(c); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// sdkMetrics are the metrics an agent process exports through
// sdk.WithMetrics. Constructing the client dials nothing.
func sdkMetrics(t *testing.T) []exportedMetric {
	t.Helper()
	reg := &recordingRegisterer{Registerer: prometheus.NewRegistry()}
	if _, err := sdk.NewClient(&rest.Config{Host: "https://127.0.0.1:1"}, sdk.WithMetrics(reg)); err != nil {
		t.Fatalf("sdk.NewClient with WithMetrics: %v", err)
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if len(reg.collectors) == 0 {
		t.Fatal("sdk.WithMetrics registered no collector")
	}
	return describe(t, "sdk", reg.collectors)
}

// exported returns every toolledger metric the manager (controllers.Metrics,
// registered in controller-runtime's registry) and the SDK export, by name.
// A name both export appears with the manager's labels.
func exported(t *testing.T) map[string]exportedMetric {
	t.Helper()
	all := map[string]exportedMetric{}
	manager := describe(t, "manager", controllers.Metrics())
	if len(manager) == 0 {
		t.Fatal("controllers.Metrics describes no metric")
	}
	for _, m := range slices.Concat(manager, sdkMetrics(t)) {
		if _, seen := all[m.Name]; !seen {
			all[m.Name] = m
		}
	}
	return all
}

// TestSDKMetricsMatchTheManagers: a metric the SDK and the manager both
// export has the same labels in both, so that the alerts and the dashboard,
// which add the agents' series to the manager's, group them alike; and the
// SDK's have the tool labels the alerts group by.
func TestSDKMetricsMatchTheManagers(t *testing.T) {
	manager := map[string]exportedMetric{}
	for _, m := range describe(t, "manager", controllers.Metrics()) {
		manager[m.Name] = m
	}
	for _, m := range sdkMetrics(t) {
		for _, l := range []string{"namespace", "tool_kind", "tool"} {
			if !slices.Contains(m.Labels, l) {
				t.Errorf("the SDK's %s has no label %s (labels %v)", m.Name, l, m.Labels)
			}
		}
		if mm, ok := manager[m.Name]; ok && !slices.Equal(sorted(mm.Labels), sorted(m.Labels)) {
			t.Errorf("%s: the SDK's labels %v differ from the manager's %v", m.Name, m.Labels, mm.Labels)
		}
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}

// metricNamePattern finds the metric names of toolledger and of
// controller-runtime in a PromQL expression. Label names (tool, tool_kind)
// and values ("toolledger-system") do not match.
var metricNamePattern = regexp.MustCompile(`\b(?:toolledger|controller_runtime|workqueue)_[a-zA-Z0-9_]*[a-zA-Z0-9]\b`)

// metricNames returns the metric names expr uses.
func metricNames(expr string) []string {
	names := metricNamePattern.FindAllString(expr, -1)
	slices.Sort(names)
	return slices.Compact(names)
}

// seriesSuffixes are those of the series of a histogram or summary.
var seriesSuffixes = []string{"_bucket", "_sum", "_count"}

// registeredInControllerRuntime says whether name is registered in
// controller-runtime's registry, which its packages' init functions fill
// with controller_runtime_* and workqueue_* vectors. A vector without
// children is absent from Gather, so this registers a probe of that name
// instead: the registry refuses it exactly when a collector already
// describes the name.
func registeredInControllerRuntime(t *testing.T, name string) bool {
	t.Helper()
	probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "probe of test/observability"})
	err := metrics.Registry.Register(probe)
	if err == nil {
		metrics.Registry.Unregister(probe)
		return false
	}
	var already prometheus.AlreadyRegisteredError
	if errors.As(err, &already) || strings.Contains(err.Error(), "same fully-qualified name") {
		return true
	}
	t.Fatalf("probing %s in controller-runtime's registry: %v", name, err)
	return false
}

// checkMetricName reports why name is not a metric the expressions may use,
// or "" when it is: a toolledger_ name must be exported by the manager or
// the SDK, a controller_runtime_ or workqueue_ one registered by
// controller-runtime; a histogram's series are named by its name and a
// suffix.
func checkMetricName(t *testing.T, exported map[string]exportedMetric, name string) string {
	t.Helper()
	candidates := []string{name}
	for _, suffix := range seriesSuffixes {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			candidates = append(candidates, base)
		}
	}
	for _, c := range candidates {
		if strings.HasPrefix(c, "toolledger_") {
			if _, ok := exported[c]; ok {
				return ""
			}
			continue
		}
		if registeredInControllerRuntime(t, c) {
			return ""
		}
	}
	if strings.HasPrefix(name, "toolledger_") {
		return "exported neither by controllers.Metrics nor by sdk.WithMetrics"
	}
	return "not registered in controller-runtime's metrics registry"
}

// TestControllerRuntimeProbe: the probe above tells a registered name from
// an unregistered one.
func TestControllerRuntimeProbe(t *testing.T) {
	for _, name := range []string{"controller_runtime_reconcile_total", "workqueue_depth", "controller_runtime_reconcile_errors_total"} {
		if !registeredInControllerRuntime(t, name) {
			t.Errorf("%s is not registered in controller-runtime's registry", name)
		}
	}
	for _, name := range []string{"workqueue_no_such_metric", "controller_runtime_no_such_metric"} {
		if registeredInControllerRuntime(t, name) {
			t.Errorf("%s is reported as registered", name)
		}
	}
}

// promtool returns the promtool binary: bin/promtool of the repository,
// which `make test` builds from hack/promtool, else one on PATH.
func promtool(t *testing.T) string {
	t.Helper()
	local := filepath.Join(repoRoot, "bin", "promtool")
	if info, err := os.Stat(local); err == nil && !info.IsDir() {
		abs, err := filepath.Abs(local)
		if err != nil {
			t.Fatal(err)
		}
		return abs
	}
	if path, err := exec.LookPath("promtool"); err == nil {
		return path
	}
	t.Fatalf("promtool not found in %s or on PATH: `make test` builds it into bin/ (hack/promtool)", filepath.Join(repoRoot, "bin"))
	return ""
}

// runPromtool runs promtool with args in the repository root and fails the
// test with its output when it fails.
func runPromtool(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), promtool(t), args...)
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, path))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func quote(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}
