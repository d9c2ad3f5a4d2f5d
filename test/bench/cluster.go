package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/pkg/digest"
)

// toolName is the Tool every benchmark namespace holds.
const toolName = "charge"

// cluster is the control plane, the demo downstream and the admin clients
// that every step of the run shares.
type cluster struct {
	suite *testenv.Suite
	// cfg reaches the API server as an admin with client-side rate limiting
	// off (QPS -1), as cmd/manager's controller-runtime config does: the
	// harness measures the server, not a client's token bucket.
	cfg *rest.Config
	k8s client.Client
	cs  kubernetes.Interface
}

func startCluster(etcdDir string) (*cluster, error) {
	suite, err := testenv.StartSuite(testenv.SuiteOptions{ControlPlane: testenv.ControlPlaneOptions{EtcdDataDir: etcdDir}})
	if err != nil {
		return nil, err
	}
	cfg := unlimited(suite.Config)
	c := &cluster{suite: suite, cfg: cfg}
	if c.k8s, err = client.New(cfg, client.Options{Scheme: app.Scheme()}); err != nil {
		return nil, errors.Join(err, suite.Stop())
	}
	if c.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, errors.Join(err, suite.Stop())
	}
	return c, nil
}

func (c *cluster) stop() error { return c.suite.Stop() }

// unlimited copies cfg without a client-side rate limit.
func unlimited(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.QPS, out.Burst = -1, 0
	out.RateLimiter = nil
	return out
}

// writeKubeconfig writes an admin kubeconfig for a manager process.
func (c *cluster) writeKubeconfig(path string) error {
	_, err := c.suite.AddAdmin("bench-manager", path)
	return err
}

// namespace creates the tool's namespace (a tenant) and the tool.
func (c *cluster) namespace(ctx context.Context, tool *v1alpha1.Tool) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tool.Namespace}}
	if err := c.k8s.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("cannot create namespace %s: %w", tool.Namespace, err)
	}
	if err := c.k8s.Create(ctx, tool); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("cannot create tool %s/%s: %w", tool.Namespace, tool.Name, err)
	}
	return nil
}

// chargeTool is the sample payments Tool (config/samples) in namespace,
// calling url: the demo downstream's charges for throughput, the counting
// downstream for recovery. Its limits are the most the CRD allows, so that
// the control plane, not a provider's rate limit, is what each run
// measures.
func chargeTool(namespace, url string, class v1alpha1.IdempotencyClass, timeout time.Duration) *v1alpha1.Tool {
	return testenv.NewTool(namespace, toolName, url, testenv.WithClass(class), testenv.WithTimeout(timeout),
		testenv.WithKeyLookup(), testenv.WithResultPointers("/status", "/amount", "/currency"),
		testenv.WithMaxAttempts(5), testenv.WithBackoff(time.Second, time.Minute), testenv.WithLimits(1000, 10000))
}

// The request every benchmark action carries: the sample's charge, with
// the amount varying so that each request is distinct.
var provenance = &v1alpha1.Provenance{
	RunID:      "bench-run",
	StepID:     "charge",
	Principals: []string{"user:bench@example.com", "agent:bench"},
}

func parameters(amount int) map[string]any {
	return map[string]any{"amount": amount, "currency": "EUR", "customer": "cus_42"}
}

// spec is the ToolAction spec an SDK invoke of parameters(amount) records.
func spec(amount int) v1alpha1.ToolActionSpec {
	return v1alpha1.ToolActionSpec{
		ToolRef: v1alpha1.ToolReference{Name: toolName},
		Parameters: map[string]apiextensionsv1.JSON{
			"amount":   {Raw: []byte(strconv.Itoa(amount))},
			"currency": {Raw: []byte(`"EUR"`)},
			"customer": {Raw: []byte(`"cus_42"`)},
		},
		Provenance: provenance.DeepCopy(),
	}
}

func requestDigest(namespace string, amount int) string {
	d, err := digest.Compute(digest.Request{
		Tenant: namespace, Tool: toolName, Operation: "payments.charge", Version: "v1",
		Parameters: json.RawMessage(fmt.Sprintf(`{"amount":%d,"currency":"EUR","customer":"cus_42"}`, amount)),
	})
	if err != nil {
		panic(err)
	}
	return d
}

// The two status writes of the happy path, shaped as the controller writes
// them (controllers/status.go): the claim, then the outcome. The ceiling
// writes them to its plain CRD and the memory step writes the second to
// finished actions, so that both carry records of the real size.
func executingStatus(namespace, name string, amount int, now time.Time) v1alpha1.ToolActionStatus {
	now = now.Truncate(time.Second)
	d := requestDigest(namespace, amount)
	executor := "bench-executor-0a1b2c"
	claimed := "attempt 1 claimed by " + executor
	t := metav1.NewTime(now)
	return v1alpha1.ToolActionStatus{
		Phase:              v1alpha1.PhaseExecuting,
		ObservedGeneration: 1,
		Conditions: []metav1.Condition{
			{Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionTrue, Reason: "Accepted", Message: "request validated; digest " + d, ObservedGeneration: 1, LastTransitionTime: t},
			{Type: v1alpha1.ConditionReconciling, Status: metav1.ConditionTrue, Reason: "Executing", Message: claimed, ObservedGeneration: 1, LastTransitionTime: t},
			{Type: v1alpha1.ConditionSucceeded, Status: metav1.ConditionUnknown, Reason: "Executing", Message: claimed, ObservedGeneration: 1, LastTransitionTime: t},
			{Type: v1alpha1.ConditionReady, Status: metav1.ConditionUnknown, Reason: "Executing", Message: claimed, ObservedGeneration: 1, LastTransitionTime: t},
		},
		RequestDigest:  d,
		IdempotencyKey: v1alpha1.IdempotencyKey(namespace, name),
		Attempts:       1,
		Claim:          &v1alpha1.ExecutorClaim{Executor: executor, Attempt: 1, LeaseExpiry: metav1.NewTime(now.Add(35 * time.Second))},
		StartTime:      &t,
		History: []v1alpha1.Transition{
			{Time: t, To: v1alpha1.PhaseExecuting, Reason: "Executing", Attempt: 1, Executor: executor, Message: claimed},
		},
	}
}

func succeededStatus(namespace, name string, amount int, now time.Time) v1alpha1.ToolActionStatus {
	s := executingStatus(namespace, name, amount, now)
	t := metav1.NewTime(now.Truncate(time.Second))
	ref := fmt.Sprintf("ch_%024x", amount)
	message := "the downstream applied the request; external reference " + ref
	s.Phase = v1alpha1.PhaseSucceeded
	s.ExternalRef = ref
	s.Result = &apiextensionsv1.JSON{Raw: fmt.Appendf(nil, `{"amount":%d,"currency":"EUR","status":"succeeded"}`, amount)}
	s.CompletionTime = &t
	s.Conditions = []metav1.Condition{
		s.Conditions[0],
		{Type: v1alpha1.ConditionSucceeded, Status: metav1.ConditionTrue, Reason: "Succeeded", Message: message, ObservedGeneration: 1, LastTransitionTime: t},
		{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Succeeded", Message: message, ObservedGeneration: 1, LastTransitionTime: t},
	}
	s.History = append(s.History, v1alpha1.Transition{
		Time: t, From: v1alpha1.PhaseExecuting, To: v1alpha1.PhaseSucceeded, Reason: "Succeeded", Attempt: 1,
		Executor: s.Claim.Executor, Message: message,
	})
	return s
}

// machine describes where the numbers were measured.
type machine struct {
	CPUs       int
	CPUModel   string
	MemoryGiB  float64
	GoVersion  string
	OS         string
	Kernel     string
	Kubernetes string
	Etcd       string
	Date       string
}

func describeMachine(ctx context.Context, c *cluster, root string) machine {
	m := machine{
		CPUs:      runtime.NumCPU(),
		GoVersion: runtime.Version(),
		OS:        runtime.GOOS + "/" + runtime.GOARCH,
		Date:      time.Now().UTC().Format("2006-01-02 15:04 MST"),
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		scanner := bufio.NewScanner(f)
		for scanner.Scan() {
			if k, v, ok := strings.Cut(scanner.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		_ = f.Close()
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
				m.MemoryGiB = kb / (1 << 20)
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	// The control plane is built from source without version stamps, so
	// the server reports v0.0.0-master; the module version it was built
	// from is in hack/controlplane/go.mod.
	reported := "unknown"
	if v, err := c.cs.Discovery().ServerVersion(); err == nil {
		reported = v.GitVersion
	}
	m.Kubernetes = moduleVersion(filepath.Join(root, "hack", "controlplane", "go.mod"), "k8s.io/kubernetes")
	m.Kubernetes += " (kube-apiserver built from source in bin/; it reports " + reported + ")"
	m.Etcd = moduleVersion(filepath.Join(root, "hack", "controlplane", "go.mod"), "go.etcd.io/etcd/server/v3")
	_ = ctx
	return m
}

func moduleVersion(goMod, module string) string {
	b, err := os.ReadFile(goMod)
	if err != nil {
		return "unknown"
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		fields := strings.Fields(strings.TrimSpace(line))
		if len(fields) >= 2 && fields[0] == module {
			return fields[1]
		}
	}
	return "unknown"
}

// repoRoot finds the module root from the working directory upwards.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for range 32 {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			strings.Contains(string(b), "module github.com/toolledger/toolledger\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return "", errors.New("run the harness from inside the toolledger repository (go run ./test/bench)")
}
