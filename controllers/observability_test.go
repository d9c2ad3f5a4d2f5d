package controllers_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gstruct"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/pkg/sdk"
)

// The metrics are scraped from the suite manager's HTTPS endpoint, as a
// Prometheus holding the shipped toolledger-metrics-reader role does. Each
// spec's tenant and tool names are its own, so the counts by tool are exact
// although the suite's other specs share the registry.
var _ = Describe("Observability", func() {
	var (
		ctx     context.Context
		ns      string
		clients *kubernetes.Clientset
	)
	BeforeEach(func() {
		ctx = context.Background()
		ns = env.NewTenant()
		var err error
		clients, err = kubernetes.NewForConfig(cfg)
		Expect(err).NotTo(HaveOccurred())
	})

	It("counts a scripted day by tool, exactly, with gauges of the unknown outcome in flight", func() {
		scraper := scraperToken(ctx, clients, ns, true)
		env.CreateTool(ns, "pay", testenv.WithKeyLookup(), testenv.WithTimeout(2*time.Second),
			testenv.WithBackoff(100*time.Millisecond, 200*time.Millisecond), testenv.WithKeyRetention(time.Hour))
		env.CreateTool(ns, "once", testenv.WithClass(v1alpha1.NonRepeatable))
		env.CreateTool(ns, "refund")
		registry := prometheus.NewRegistry()
		agent, err := sdk.NewClient(cfg, sdk.WithMetrics(registry))
		Expect(err).NotTo(HaveOccurred())
		invoke := func(key string, amount int, provenance *v1alpha1.Provenance) (*sdk.Outcome, error) {
			invokeCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			return agent.Invoke(invokeCtx, sdk.Request{Namespace: ns, Key: key, Tool: "pay", Provenance: provenance,
				Parameters: map[string]any{"amount": amount, "currency": "EUR", "customer": "cus_42"}})
		}

		By("a success, its SDK duplicate and a conflicting payload under its key")
		traced := &v1alpha1.Provenance{RunID: "run-7", StepID: "step-3", TraceID: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
		first, err := invoke("o-1", 100, traced)
		Expect(err).NotTo(HaveOccurred())
		Expect(first.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		again, err := invoke("o-1", 100, traced)
		Expect(err).NotTo(HaveOccurred())
		Expect(again.Deduplicated).To(BeTrue())
		_, err = invoke("o-1", 999, traced)
		var conflict *sdk.DuplicateConflictError
		Expect(errors.As(err, &conflict)).To(BeTrue(), "a different payload under o-1: %v", err)

		By("a retry: the downstream is unavailable once")
		downstream.InjectFault(demo.Fault{Mode: demo.FaultUnavailable, Count: 1})
		Expect(k8s.Create(ctx, newAction(ns, "o-2", "pay", charge(200)))).To(Succeed())
		env.WaitForPhase(ns, "o-2", v1alpha1.PhaseSucceeded)

		By("a lost response, unknown while two lookups cannot tell, then found")
		downstream.InjectFault(demo.Fault{Mode: demo.FaultDropAfterCommit, Count: 1})
		downstream.InjectFault(demo.Fault{Mode: demo.FaultLookupUnavailable, Count: 2})
		Expect(k8s.Create(ctx, newAction(ns, "o-3", "pay", charge(300)))).To(Succeed())
		pay := map[string]string{"namespace": ns, "tool_kind": "Tool", "tool": "pay", "class": "KeyProtected"}
		Eventually(func(g Gomega) {
			m := scrape(g, scraper)
			g.Expect(m.value("toolledger_unknown_outcomes", pay)).To(Equal(1.0))
			g.Expect(m.value("toolledger_unknown_outcome_oldest_age_seconds", pay)).To(BeNumerically(">", 0))
		}).Should(Succeed())
		found := env.WaitForPhase(ns, "o-3", v1alpha1.PhaseSucceeded)
		Expect(transitions(found)).To(Equal([]string{"Executing/Executing", "Unknown/OutcomeUnknown", "Succeeded/FoundByLookup"}))
		Expect(found.Status.Lookups).To(Equal(int32(2)), "two inconclusive lookups before the one that found it")

		By("an escalation and its resolution")
		downstream.InjectFault(demo.Fault{Mode: demo.FaultDropAfterCommit, Count: 1})
		Expect(k8s.Create(ctx, newAction(ns, "o-4", "once", charge(400)))).To(Succeed())
		env.WaitForPhase(ns, "o-4", v1alpha1.PhaseEscalated)
		charged, ok := downstream.Charge(keyOf(ns, "o-4"))
		Expect(ok).To(BeTrue())
		Expect(k8s.Create(ctx, &v1alpha1.ToolResolution{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "o-4-found"},
			Spec: v1alpha1.ToolResolutionSpec{ActionName: "o-4", Attempt: 1, Outcome: v1alpha1.ResolvedSucceeded,
				ExternalRef: charged.ID, Reason: "found in the provider's dashboard"},
		})).To(Succeed())
		env.WaitForPhase(ns, "o-4", v1alpha1.PhaseSucceeded)

		By("a compensation of o-1")
		refund := newAction(ns, "o-1-refund", "refund", charge(100))
		refund.Spec.Compensates = "o-1"
		Expect(k8s.Create(ctx, refund)).To(Succeed())
		env.WaitForPhase(ns, "o-1-refund", v1alpha1.PhaseSucceeded)

		By("a duplicate answered by a tombstone: o-2 deleted, then applied again")
		Expect(k8s.Delete(ctx, env.Get(ns, "o-2"))).To(Succeed())
		Eventually(func() error {
			return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "o-2"}, &v1alpha1.ToolAction{})
		}).Should(Satisfy(func(err error) bool { return client.IgnoreNotFound(err) == nil && err != nil }))
		Expect(k8s.Create(ctx, newAction(ns, "o-2", "pay", charge(200)))).To(Succeed())
		settled := env.WaitForPhase(ns, "o-2", v1alpha1.PhaseSucceeded)
		Expect(transitions(settled)).To(Equal([]string{"Succeeded/SettledByTombstone"}))

		By("the manager's counts by tool")
		once := map[string]string{"namespace": ns, "tool_kind": "Tool", "tool": "once", "class": "NonRepeatable"}
		refunds := map[string]string{"namespace": ns, "tool_kind": "Tool", "tool": "refund", "class": "KeyProtected"}
		payTool := map[string]string{"namespace": ns, "tool_kind": "Tool", "tool": "pay"}
		with := func(base map[string]string, kv ...string) map[string]string {
			out := map[string]string{}
			for k, v := range base {
				out[k] = v
			}
			for i := 0; i < len(kv); i += 2 {
				out[kv[i]] = kv[i+1]
			}
			return out
		}
		// Counts land after the write that makes them visible; wait for the last.
		Eventually(func(g Gomega) {
			g.Expect(scrape(g, scraper).value("toolledger_actions_finished_total", with(pay, "phase", "Succeeded", "error_class", ""))).To(Equal(4.0))
		}).Should(Succeed())
		m := scrape(Default, scraper)
		for _, c := range []struct {
			name   string
			labels map[string]string
			want   float64
		}{
			{"toolledger_actions_created_total", pay, 4}, // o-1, o-2, o-3 and o-2 again
			{"toolledger_actions_finished_total", with(pay, "phase", "Succeeded", "error_class", ""), 4},
			{"toolledger_dispatch_attempts_total", with(pay, "result", "succeeded"), 2},
			{"toolledger_dispatch_attempts_total", with(pay, "result", "retryable"), 1},
			{"toolledger_dispatch_attempts_total", with(pay, "result", "unknown"), 1},
			{"toolledger_dispatch_attempts_total", with(pay, "result", "failed"), 0},
			{"toolledger_retries_total", pay, 1},
			{"toolledger_lookups_total", with(pay, "result", "found"), 1},
			{"toolledger_lookups_total", with(pay, "result", "inconclusive"), 2},
			{"toolledger_lookups_total", with(pay, "result", "absent"), 0},
			{"toolledger_dispatch_duration_seconds", with(pay, "operation", "attempt"), 4},
			{"toolledger_dispatch_duration_seconds", with(pay, "operation", "lookup"), 3},
			{"toolledger_action_duration_seconds", with(pay, "phase", "Succeeded"), 4},
			{"toolledger_escalations_total", pay, 0},
			{"toolledger_duplicate_hits_total", with(payTool, "source", "tombstone"), 1},
			{"toolledger_duplicate_age_seconds", with(payTool, "source", "tombstone"), 1},
			{"toolledger_duplicate_age_retention_ratio", with(payTool, "source", "tombstone"), 1},
			// The SDK's duplicate never reached the manager, which counts none.
			{"toolledger_duplicate_hits_total", with(payTool, "source", "sdk"), 0},
			{"toolledger_key_conflicts_total", payTool, 0},
			{"toolledger_unknown_outcomes", pay, 0},
			{"toolledger_unknown_outcome_oldest_age_seconds", pay, 0},
			{"toolledger_unknown_outcomes_overdue", pay, 0},

			{"toolledger_actions_created_total", once, 1},
			{"toolledger_dispatch_attempts_total", with(once, "result", "unknown"), 1},
			{"toolledger_escalations_total", with(once, "reason", "OutcomeUnknown"), 1},
			{"toolledger_resolutions_total", with(once, "outcome", "Succeeded"), 1},
			{"toolledger_actions_finished_total", with(once, "phase", "Succeeded", "error_class", ""), 1},
			{"toolledger_lookups_total", once, 0},

			{"toolledger_actions_created_total", refunds, 1},
			{"toolledger_compensations_total", refunds, 1},
			{"toolledger_compensations_total", pay, 0},
			{"toolledger_actions_finished_total", with(refunds, "phase", "Succeeded"), 1},
		} {
			Expect(m.value(c.name, c.labels)).To(Equal(c.want), "%s%v", c.name, c.labels)
		}

		By("the agent's own counts, from the SDK's registry")
		families, err := registry.Gather()
		Expect(err).NotTo(HaveOccurred())
		agentMetrics := sampled(families)
		sdkSource := with(payTool, "source", "sdk")
		Expect(agentMetrics.value("toolledger_duplicate_hits_total", sdkSource)).To(Equal(1.0))
		Expect(agentMetrics.value("toolledger_key_conflicts_total", sdkSource)).To(Equal(1.0))
		Expect(agentMetrics.value("toolledger_duplicate_age_seconds", sdkSource)).To(Equal(1.0))
		Expect(agentMetrics.value("toolledger_duplicate_age_retention_ratio", sdkSource)).To(Equal(1.0))
		Expect(agentMetrics.bucket("toolledger_duplicate_age_retention_ratio", sdkSource, 0.8)).To(Equal(1.0),
			"a duplicate seconds after completion is far from the end of an hour's key retention")

		By("one event per transition of o-3, in order")
		var events eventsv1.EventList
		Expect(k8s.List(ctx, &events, client.InNamespace(ns))).To(Succeed())
		var story []string
		slices.SortFunc(events.Items, func(a, b eventsv1.Event) int { return a.EventTime.Compare(b.EventTime.Time) })
		for _, e := range events.Items {
			if e.Regarding.Name == "o-3" {
				story = append(story, e.Type+"/"+e.Reason)
			}
		}
		Expect(story).To(Equal([]string{"Normal/Executing", "Warning/ConnectionLost", "Normal/FoundByLookup"}))

		By("the dispatch's log line naming the action, its attempt, executor and provenance")
		dispatched := managerLogs.Matching(func(line map[string]any) bool {
			return line["msg"] == "Attempt dispatched" && line["namespace"] == ns && line["key"] == "o-1"
		})
		Expect(dispatched).To(HaveLen(1))
		Expect(dispatched[0]).To(gstruct.MatchKeys(gstruct.IgnoreExtras, gstruct.Keys{
			"tool": Equal("pay"), "attempt": BeNumerically("==", 1), "executor": Equal(executorID), "result": Equal("succeeded"),
			"runID": Equal("run-7"), "stepID": Equal("step-3"), "traceID": Equal(traced.TraceID),
		}))
	})

	It("serves metrics only to a caller the API server authenticates and authorizes", func() {
		stranger := scraperToken(ctx, clients, ns, false)
		status := func(token string) int {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL, nil)
			Expect(err).NotTo(HaveOccurred())
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := metricsClient.Do(req)
			Expect(err).NotTo(HaveOccurred())
			_ = resp.Body.Close()
			return resp.StatusCode
		}
		Expect(status("")).To(Equal(http.StatusUnauthorized))
		// controller-runtime's filter answers a token the API server rejects
		// with 500 ("Authentication failed"), not 401; either way, no metrics.
		Expect(status("not-a-token")).To(Equal(http.StatusInternalServerError))
		Expect(status(stranger)).To(Equal(http.StatusForbidden))
		Expect(status(scraperToken(ctx, clients, ns, true))).To(Equal(http.StatusOK))
	})
})

// scraperToken returns a token of a new ServiceAccount of ns, bound to the
// shipped toolledger-metrics-reader ClusterRole when reader is set.
func scraperToken(ctx context.Context, clients *kubernetes.Clientset, ns string, reader bool) string {
	GinkgoHelper()
	name := "stranger"
	if reader {
		name = "scraper"
		out, err := env.Kubectl("apply", "-f", "../config/rbac/role_metrics_reader.yaml")
		Expect(err).NotTo(HaveOccurred(), out)
	}
	if _, err := clients.CoreV1().ServiceAccounts(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
		_, err = clients.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
	}
	if reader {
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "metrics-" + ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "toolledger-metrics-reader"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
		}
		if err := k8s.Create(ctx, binding); client.IgnoreAlreadyExists(err) != nil {
			Expect(err).NotTo(HaveOccurred())
		}
		DeferCleanup(func() { _ = k8s.Delete(context.Background(), binding) })
	}
	expiry := int64(600)
	token, err := clients.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	return token.Status.Token
}

// metricsClient reaches the suite manager's metrics endpoint, whose
// certificate is self-signed (no --metrics-cert-dir): the specs test
// authentication and authorization, not the certificate.
var metricsClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the manager's self-signed certificate
}}

// scrape reads the suite manager's metrics with token.
func scrape(g Gomega, token string) samples {
	req, err := http.NewRequest(http.MethodGet, metricsURL, nil) //nolint:noctx // bounded by the client's timeout
	g.Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := metricsClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	out := make([]*dto.MetricFamily, 0, len(families))
	for _, f := range families {
		out = append(out, f)
	}
	return sampled(out)
}

// samples are scraped metric families by name.
type samples map[string]*dto.MetricFamily

func sampled(families []*dto.MetricFamily) samples {
	out := samples{}
	for _, f := range families {
		out[f.GetName()] = f
	}
	return out
}

// value sums the series of name whose labels include labels: a counter's
// or gauge's value, a histogram's count of observations; 0 when none.
func (s samples) value(name string, labels map[string]string) float64 {
	total := 0.0
	for _, m := range s.matching(name, labels) {
		switch {
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Histogram != nil:
			total += float64(m.Histogram.GetSampleCount())
		}
	}
	return total
}

// bucket sums a histogram's cumulative count at upper bound le.
func (s samples) bucket(name string, labels map[string]string, le float64) float64 {
	total := 0.0
	for _, m := range s.matching(name, labels) {
		for _, b := range m.GetHistogram().GetBucket() {
			if b.GetUpperBound() == le {
				total += float64(b.GetCumulativeCount())
			}
		}
	}
	return total
}

func (s samples) matching(name string, labels map[string]string) []*dto.Metric {
	var out []*dto.Metric
	for _, m := range s[name].GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		matches := true
		for k, v := range labels {
			matches = matches && have[k] == v
		}
		if matches {
			out = append(out, m)
		}
	}
	return out
}
