//go:build node && linux

package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/sdk"
)

// The release the suite installs, as docs/deploy.md does.
const (
	release          = "toolledger"
	releaseNamespace = "toolledger-system"
)

// kubectl runs the project's kubectl (and, through it, the kubectl
// toolledger plugin the suite built) as the user of kubeconfig.
func kubectl(ctx context.Context, kubeconfig string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(root, "bin", "kubectl"), args...)
	// Through the environment: kubectl takes no flag before a plugin's name.
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "PATH="+bin+":"+filepath.Join(root, "bin")+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// admin runs kubectl as the admin and expects it to succeed.
func admin(ctx context.Context, args ...string) string {
	GinkgoHelper()
	out, err := kubectl(ctx, cluster.Kubeconfig, args...)
	Expect(err).NotTo(HaveOccurred(), "kubectl %s: %s", strings.Join(args, " "), out)
	return out
}

// helm runs the project's helm on the node as the admin.
func helm(ctx context.Context, args ...string) {
	GinkgoHelper()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "bin", "helm"), append([]string{"--kubeconfig", cluster.Kubeconfig}, args...)...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "helm %s: %s", strings.Join(args, " "), out)
}

// chartValues are the values every release of the suite sets: the
// project's image, which the node has and never pulls, and egress to the
// pods' and Services' ranges, where the suite's downstream runs.
var chartValues = []string{
	"--set", "image.repository=" + imageRepository, "--set", "image.tag=" + imageTag, "--set", "image.pullPolicy=Never",
	"--set-json", `egress.allow=["10.244.0.0/24","10.96.0.0/16"]`,
	"--set-json", `kubernetesApply.namespaces=["ops"]`,
}

// createNamespace makes a namespace, or finds it.
func createNamespace(ctx context.Context, name string) {
	GinkgoHelper()
	err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if !apierrors.IsAlreadyExists(err) {
		Expect(err).NotTo(HaveOccurred())
	}
}

// downstream is the demo payments service running as a pod behind a
// Service: naive, so that a request sent twice is counted as two effects.
type downstream struct {
	namespace string
	// url is its Service's URL, as a Tool names it.
	url string
}

func deployDownstream(ctx context.Context, namespace string) *downstream {
	GinkgoHelper()
	createNamespace(ctx, namespace)
	labels := map[string]string{"app": "demo-downstream"}
	Expect(k8s.Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "demo-downstream", Namespace: namespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name: "downstream", Image: downstreamImage, ImagePullPolicy: corev1.PullNever,
						Args:  []string{"--listen=:8089", "--naive"},
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8089}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
							TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("http")},
						}, PeriodSeconds: 1},
						SecurityContext: &corev1.SecurityContext{
							RunAsNonRoot: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
						},
					}},
				},
			},
		},
	})).To(Succeed())
	Expect(k8s.Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: namespace},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 8089, TargetPort: intstr.FromString("http")}}},
	})).To(Succeed())
	admin(ctx, "rollout", "status", "-n", namespace, "deployment/demo-downstream", "--timeout=2m")
	return &downstream{namespace: namespace, url: fmt.Sprintf("http://demo.%s.svc.cluster.local:8089", namespace)}
}

// stats is the downstream's count of requests and effects by key.
type stats struct {
	Requests map[string]int `json:"requests"`
	Effects  map[string]int `json:"effects"`
}

// stats reads the downstream's counts through its Service's ClusterIP,
// which the host reaches on the node's bridge.
func (d *downstream) stats(ctx context.Context) stats {
	GinkgoHelper()
	var svc corev1.Service
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: d.namespace, Name: "demo"}, &svc)).To(Succeed())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s:8089/_admin/stats", svc.Spec.ClusterIP), nil)
	Expect(err).NotTo(HaveOccurred())
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	var s stats
	Expect(json.NewDecoder(resp.Body).Decode(&s)).To(Succeed())
	return s
}

// chargeTool is the sample payments Tool (config/samples) with the suite's
// downstream as its URL, of class, keeping its finished records for
// retention.
func chargeTool(namespace string, d *downstream, class v1alpha1.IdempotencyClass, retention time.Duration) *v1alpha1.Tool {
	GinkgoHelper()
	sample, err := os.ReadFile(filepath.Join(root, "config", "samples", "toolledger_v1alpha1_tool.yaml"))
	Expect(err).NotTo(HaveOccurred())
	var tool v1alpha1.Tool
	Expect(yaml.Unmarshal([]byte(strings.ReplaceAll(string(sample), "http://127.0.0.1:8089", d.url)), &tool)).To(Succeed())
	tool.Namespace = namespace
	tool.Spec.IdempotencyClass = class
	if retention > 0 {
		tool.Spec.RecordRetention = &metav1.Duration{Duration: retention}
	}
	return &tool
}

// managerPods lists the release's manager pods, but for those stopping.
func managerPods(ctx context.Context) []corev1.Pod {
	GinkgoHelper()
	var pods corev1.PodList
	Expect(k8s.List(ctx, &pods, client.InNamespace(releaseNamespace),
		client.MatchingLabels{"app.kubernetes.io/instance": release, "app.kubernetes.io/component": "controller-manager"})).To(Succeed())
	return slices.DeleteFunc(pods.Items, func(pod corev1.Pod) bool { return pod.DeletionTimestamp != nil })
}

// restarts is the sum of the manager containers' restart counts, and the
// reasons their last runs ended for.
func restarts(pods []corev1.Pod) (int32, []string) {
	var n int32
	var reasons []string
	for _, pod := range pods {
		for _, status := range pod.Status.ContainerStatuses {
			n += status.RestartCount
			if t := status.LastTerminationState.Terminated; t != nil {
				reasons = append(reasons, pod.Name+": "+t.Reason)
			}
		}
	}
	return n, reasons
}

// agents run count actions through the SDK in namespace, as user, from
// workers goroutines, and return each key's outcome phase ("" for an
// action whose outcome the agent never saw).
func runAgents(ctx context.Context, kubeconfig, namespace, prefix string, count, workers int) map[string]v1alpha1.Phase {
	GinkgoHelper()
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	config.QPS, config.Burst = 50, 100
	agent, err := sdk.NewClient(config)
	Expect(err).NotTo(HaveOccurred())
	keys := make(chan string)
	go func() {
		defer close(keys)
		for i := range count {
			keys <- fmt.Sprintf("%s-%04d", prefix, i)
		}
	}()
	var mu sync.Mutex
	phases := map[string]v1alpha1.Phase{}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			defer GinkgoRecover()
			for key := range keys {
				invokeCtx, cancel := context.WithTimeout(ctx, 8*time.Minute)
				outcome, err := agent.Invoke(invokeCtx, sdk.Request{
					Namespace: namespace, Key: key, Tool: "charge",
					Parameters: map[string]any{"amount": 1000, "currency": "EUR", "customer": "cus_" + key},
				})
				cancel()
				mu.Lock()
				if outcome != nil {
					phases[key] = outcome.Phase
				} else {
					phases[key] = ""
				}
				mu.Unlock()
				if err != nil {
					_, _ = fmt.Fprintf(GinkgoWriter, "agent: %s: %v\n", key, err)
				}
			}
		})
	}
	wg.Wait()
	return phases
}

// tally counts, over the keys of phases, the duplicates (effects beyond the
// first, for any key), the escalated (an attempt whose outcome nobody could
// prove, which a NonRepeatable tool leaves to a person: its effect happened
// once or not at all) and the lost (an action that settled nowhere, or that
// succeeded without its effect).
func tally(phases map[string]v1alpha1.Phase, namespace string, s stats) (duplicates, escalated, lost int) {
	for key, phase := range phases {
		effects := s.Effects[namespace+"/"+key]
		duplicates += max(0, effects-1)
		switch {
		case phase == v1alpha1.PhaseEscalated:
			escalated++
		case phase != v1alpha1.PhaseSucceeded || effects == 0:
			lost++
		}
	}
	return duplicates, escalated, lost
}

// bindRole binds the user to the ClusterRole in namespace.
func bindRole(ctx context.Context, namespace, user, clusterRole string) {
	GinkgoHelper()
	Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user + "-" + clusterRole, Namespace: namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	})).To(Succeed())
}

// describeFailure writes what a failed spec needs to be understood: the
// pods, the actions that have not finished, and the managers' logs.
func describeFailure(ctx context.Context) {
	for _, args := range [][]string{
		{"get", "pods", "-A", "-o", "wide"},
		{"get", "toolactions", "-A", "-o", "custom-columns=NS:.metadata.namespace,KEY:.metadata.name,PHASE:.status.phase,REASON:.status.conditions[*].reason,MESSAGE:.status.conditions[*].message"},
		{"get", "events", "-n", releaseNamespace},
		{"logs", "-n", releaseNamespace, "-l", "app.kubernetes.io/component=controller-manager", "--tail=60", "--prefix"},
	} {
		out, _ := kubectl(ctx, cluster.Kubeconfig, args...)
		lines := strings.Split(out, "\n")
		if len(lines) > 150 {
			lines = append(lines[:150], fmt.Sprintf("... %d lines more", len(lines)-150))
		}
		_, _ = fmt.Fprintf(GinkgoWriter, "$ kubectl %s\n%s\n", strings.Join(args, " "), strings.Join(lines, "\n"))
	}
}

// row is one scenario's line in test/node/results.md.
type row struct {
	scenario                             string
	actions, duplicates, escalated, lost int
	restarts                             int32
	wall                                 time.Duration
}

// record adds a scenario's row, with the managers' restarts as they are.
func record(ctx context.Context, scenario string, actions, duplicates, escalated, lost int, started time.Time) {
	GinkgoHelper()
	n, _ := restarts(managerPods(ctx))
	rows = append(rows, row{scenario: scenario, actions: actions, duplicates: duplicates, escalated: escalated, lost: lost,
		restarts: n, wall: time.Since(started)})
}

var (
	rows []row
	// anyFailed says a spec failed: the results are then not written.
	anyFailed bool
	// phases are the suite's own timings: build, bring-up, teardown.
	phaseTimes []string
)

// writeResults writes test/node/results.md from the scenarios' rows and the
// suite's timings.
func writeResults() error {
	var b strings.Builder
	b.WriteString("# Results on a real node\n\n")
	b.WriteString("Written by `make test-node` (`test/node`, build tag `node`): the chart installed on a single-node Kubernetes v1.37.2 made on this machine (kubelet, containerd, runc, CNI bridge, kube-proxy, CoreDNS, the controller-manager and the scheduler), with images built from the project's binaries.\n")
	fmt.Fprintf(&b, "%s, GOMAXPROCS %d. %s.\n\n", goruntime.Version(), goruntime.GOMAXPROCS(0), strings.Join(phaseTimes, ", "))
	b.WriteString("`duplicates` counts downstream effects beyond the first for a key (the demo downstream runs naive: a request sent twice is two effects); `lost` counts actions that settled nowhere, or succeeded without their effect; `escalated` counts attempts whose outcome nobody could prove, which a NonRepeatable tool leaves to a person; `restarts` sums the manager containers' restart counts at the end of the scenario.\n\n")
	b.WriteString("| scenario | actions | duplicates | escalated | lost | restarts | wall time |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %s |\n", r.scenario, r.actions, r.duplicates, r.escalated, r.lost, r.restarts, r.wall.Round(time.Second))
	}
	return os.WriteFile(filepath.Join(root, "test", "node", "results.md"), []byte(b.String()), 0o644)
}
