//go:build node && linux

package node

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/internal/testnode"
	"github.com/toolledger/toolledger/pkg/sdk"
)

// The chart's life on the node, in order: each step starts from the
// release the step before left.
var _ = Describe("The chart on a real node", Ordered, func() {
	var shop *downstream

	JustAfterEach(func(ctx SpecContext) {
		if CurrentSpecReport().Failed() {
			anyFailed = true
			describeFailure(ctx)
		}
	})

	It("installs as docs/deploy.md says, and the sample action Succeeded against a downstream pod", func(ctx SpecContext) {
		// The tenant whose kubernetesApply Tools the release may run.
		createNamespace(ctx, "ops")
		started := time.Now()
		helm(ctx, append([]string{"install", release, "charts/toolledger", "-n", releaseNamespace, "--create-namespace",
			"--wait", "--timeout", "5m"}, chartValues...)...)
		report("helm install", started)
		pods := managerPods(ctx)
		Expect(pods).To(HaveLen(2), "the chart's default: two replicas")

		shop = deployDownstream(ctx, "payments")
		createNamespace(ctx, "shop")
		Expect(k8s.Create(ctx, chargeTool("shop", shop, v1alpha1.KeyProtected, 0))).To(Succeed())
		admin(ctx, "apply", "-n", "shop", "-f", filepath.Join(root, "config", "samples", "toolledger_v1alpha1_toolaction.yaml"))
		admin(ctx, "wait", "-n", "shop", "toolaction/order-1001-charge", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=2m")
		Expect(shop.stats(ctx).Effects).To(HaveKeyWithValue(ContainSubstring("order-1001-charge"), 1))

		status := admin(ctx, "toolledger", "status", "order-1001-charge", "-n", "shop")
		Expect(status).To(ContainSubstring("Succeeded"))

		By("applying the same file again: no second effect")
		admin(ctx, "apply", "-n", "shop", "-f", filepath.Join(root, "config", "samples", "toolledger_v1alpha1_toolaction.yaml"))
		Consistently(func() map[string]int { return shop.stats(ctx).Effects }, 5*time.Second).
			Should(HaveKeyWithValue(ContainSubstring("order-1001-charge"), 1))
		n, reasons := restarts(managerPods(ctx))
		Expect(n).To(BeZero(), "restarts: %v", reasons)
		record(ctx, "helm install (2 replicas); the sample action applied twice", 1, shop.stats(ctx).Effects["shop/order-1001-charge"]-1, 0, 0, started)
	})

	It("rolls out the archive to 3 replicas while agents run 500 actions through the SDK: 0 duplicates, 0 lost", func(ctx SpecContext) {
		createNamespace(ctx, "agents")
		tool := chargeTool("agents", shop, v1alpha1.NonRepeatable, 20*time.Second)
		Expect(k8s.Create(ctx, tool)).To(Succeed())
		agentConfig, err := cluster.UserKubeconfig("agent")
		Expect(err).NotTo(HaveOccurred())
		bindRole(ctx, "agents", "agent", release+"-agent")

		archive := startArchive(ctx)
		done := make(chan map[string]v1alpha1.Phase)
		go func() {
			defer GinkgoRecover()
			done <- runAgents(ctx, agentConfig, "agents", "load", 500, 8)
		}()
		started := time.Now()
		helm(ctx, append(append([]string{"upgrade", release, "charts/toolledger", "-n", releaseNamespace, "--wait", "--timeout", "10m",
			"--set", "replicaCount=3"}, archive.values()...), chartValues...)...)
		report("helm upgrade to the archive", started)
		var phases map[string]v1alpha1.Phase
		Eventually(done, 10*time.Minute).Should(Receive(&phases))
		report("500 actions through the upgrade", started)
		duplicates, escalated, lost := tally(phases, "agents", shop.stats(ctx))
		AddReportEntry("upgrade: actions, duplicates, escalated, lost", fmt.Sprintf("%d, %d, %d, %d", len(phases), duplicates, escalated, lost))
		Expect(phases).To(HaveLen(500))
		Expect(duplicates).To(BeZero())
		Expect(escalated).To(BeZero(), "a rolling update stops managers gracefully: no outcome is left unknown")
		Expect(lost).To(BeZero())
		record(ctx, "helm upgrade turning the archive on, 2 → 3 replicas rolling, 500 SDK actions (NonRepeatable) meanwhile", len(phases), duplicates, escalated, lost, started)
		Expect(managerPods(ctx)).To(HaveLen(3))
		n, reasons := restarts(managerPods(ctx))
		Expect(n).To(BeZero(), "restarts: %v", reasons)

		By("the records leave etcd for the archive, and a tenant's user reads them through the aggregated API")
		Eventually(func(g Gomega) {
			var actions v1alpha1.ToolActionList
			g.Expect(k8s.List(ctx, &actions, client.InNamespace("agents"))).To(Succeed())
			g.Expect(actions.Items).To(BeEmpty())
		}, 3*time.Minute).Should(Succeed())
		listed, err := kubectl(ctx, agentConfig, "get", "archivedtoolactions", "-n", "agents", "--no-headers")
		Expect(err).NotTo(HaveOccurred(), listed)
		Expect(strings.Count(listed, "\n")).To(BeNumerically(">=", 400), "records archived after the archive came")
		strangerConfig, err := cluster.UserKubeconfig("stranger")
		Expect(err).NotTo(HaveOccurred())
		forbidden, err := kubectl(ctx, strangerConfig, "get", "archivedtoolactions", "-n", "agents")
		Expect(err).To(HaveOccurred())
		Expect(forbidden).To(ContainSubstring("forbidden"))
	})

	It("loses and repeats nothing when managers are killed mid-dispatch and the node is drained", func(ctx SpecContext) {
		agentConfig, err := cluster.UserKubeconfig("agent")
		Expect(err).NotTo(HaveOccurred())
		done := make(chan map[string]v1alpha1.Phase)
		started := time.Now()
		go func() {
			defer GinkgoRecover()
			done <- runAgents(ctx, agentConfig, "agents", "kill", 300, 8)
		}()
		pods := managerPods(ctx)
		Expect(pods).To(HaveLen(3))
		Eventually(func() int { return len(shop.stats(ctx).Effects) }).Should(BeNumerically(">=", 1+500+30), "dispatch under way")

		By("kubectl delete pod --force of one manager")
		admin(ctx, "delete", "pod", "-n", releaseNamespace, pods[0].Name, "--force", "--grace-period=0")
		By("SIGKILL of another manager's container")
		Expect(cluster.KillContainer(ctx, pods[1].Status.ContainerStatuses[0].ContainerID)).To(Succeed())

		By("a drain of the node: the PodDisruptionBudget lets one manager go at a time")
		Eventually(func(g Gomega) {
			ready := 0
			for _, pod := range managerPods(ctx) {
				for _, c := range pod.Status.Conditions {
					if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
						ready++
					}
				}
			}
			g.Expect(ready).To(Equal(3))
		}, 3*time.Minute).Should(Succeed())
		drained, err := kubectl(ctx, cluster.Kubeconfig, "drain", testnode.NodeName, "--pod-selector",
			"app.kubernetes.io/component=controller-manager", "--timeout=40s")
		Expect(err).To(HaveOccurred(), "one node cannot hold the evicted managers' replacements: the budget stops the drain")
		Expect(drained).To(ContainSubstring("disruption budget"))
		admin(ctx, "uncordon", testnode.NodeName)

		var phases map[string]v1alpha1.Phase
		Eventually(done, 10*time.Minute).Should(Receive(&phases))
		duplicates, escalated, lost := tally(phases, "agents", shop.stats(ctx))
		AddReportEntry("kills and drain: actions, duplicates, escalated, lost", fmt.Sprintf("%d, %d, %d, %d", len(phases), duplicates, escalated, lost))
		record(ctx, "kubectl delete pod --force, SIGKILL of a container, node drain stopped by the PodDisruptionBudget, 300 SDK actions (NonRepeatable) meanwhile",
			len(phases), duplicates, escalated, lost, started)
		Expect(phases).To(HaveLen(300))
		Expect(duplicates).To(BeZero())
		Expect(lost).To(BeZero())
		admin(ctx, "rollout", "status", "-n", releaseNamespace, "deployment/"+release, "--timeout=3m")
	})

	It("lists large archived records under the chart's memory limit without a restart", func(ctx SpecContext) {
		started := time.Now()
		createNamespace(ctx, "bulky")
		// The downstream refuses each (404): a Failed record is archived
		// with its parameters as a Succeeded one is, and nothing is charged.
		bulky := chargeTool("bulky", shop, v1alpha1.KeyProtected, 5*time.Second)
		bulky.Spec.HTTP.URL = shop.url + "/no-such-endpoint"
		Expect(k8s.Create(ctx, bulky)).To(Succeed())
		agent, err := sdk.NewClient(cluster.Admin)
		Expect(err).NotTo(HaveOccurred())
		// Just under the ledger's 1 MiB limit on an action's parameters.
		memo := strings.Repeat("m", 1<<20-1<<10)
		for i := range 40 {
			outcome, err := agent.Invoke(ctx, sdk.Request{Namespace: "bulky", Key: fmt.Sprintf("bulky-%02d", i), Tool: "charge",
				Parameters: map[string]any{"amount": 1000, "currency": "EUR", "customer": fmt.Sprintf("cus_%02d_%s", i, memo)}})
			Expect(err).NotTo(HaveOccurred())
			Expect(outcome.Phase).To(Equal(v1alpha1.PhaseFailed))
		}
		Eventually(func(g Gomega) {
			listed, err := kubectl(ctx, cluster.Kubeconfig, "get", "archivedtoolactions", "-n", "bulky", "--no-headers")
			g.Expect(err).NotTo(HaveOccurred(), listed)
			g.Expect(strings.Count(listed, "\n")).To(Equal(40))
		}, 3*time.Minute).Should(Succeed())
		before, _ := restarts(managerPods(ctx))
		for range 3 {
			for _, chunk := range []string{"--chunk-size=500", "--chunk-size=0"} {
				listed, err := kubectl(ctx, cluster.Kubeconfig, "get", "archivedtoolactions", "-n", "bulky", "-o", "json", chunk)
				Expect(err).NotTo(HaveOccurred(), listed)
			}
		}
		Consistently(func() int32 { n, _ := restarts(managerPods(ctx)); return n }, 10*time.Second).Should(Equal(before))
		_, reasons := restarts(managerPods(ctx))
		Expect(reasons).NotTo(ContainElement(ContainSubstring("OOMKilled")))
		duplicates, effects := 0, shop.stats(ctx).Effects
		for i := range 40 {
			duplicates += max(0, effects[fmt.Sprintf("bulky/bulky-%02d", i)]-1)
		}
		record(ctx, "40 archived records (Failed: the downstream refused them) with a 1 MiB parameter, listed 3 times paged and 3 times whole under the chart's memory limit",
			40, duplicates, 0, 0, started)
	})

	It("keeps one effect when the TTL controller removes the Job a ToolAction created and the garbage collector its pods", func(ctx SpecContext) {
		started := time.Now()
		createNamespace(ctx, "ops")
		admin(ctx, "create", "serviceaccount", "-n", "ops", "job-runner")
		admin(ctx, "create", "role", "-n", "ops", "job-writer", "--verb=get,create,patch", "--resource=jobs.batch")
		admin(ctx, "create", "rolebinding", "-n", "ops", "job-writer", "--role=job-writer", "--serviceaccount=ops:job-runner")
		Expect(k8s.Create(ctx, &v1alpha1.Tool{
			ObjectMeta: metav1.ObjectMeta{Name: "report", Namespace: "ops"},
			Spec: v1alpha1.ToolSpec{
				Operation: "reports.run", Version: "v1", IdempotencyClass: v1alpha1.NaturallyIdempotent,
				KubernetesApply: &v1alpha1.KubernetesApplyAdapter{
					ServiceAccountName: "job-runner",
					Template: apiextensionsv1.JSON{Raw: []byte(`{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"report-{{day}}"},
"spec":{"ttlSecondsAfterFinished":3,"backoffLimit":0,"template":{"spec":{"restartPolicy":"Never",
"containers":[{"name":"report","image":"` + downstreamImage + `","imagePullPolicy":"Never","args":["-help"]}]}}}}`)},
				},
			},
		})).To(Succeed())
		action := []byte(`{"apiVersion":"toolledger.dev/v1alpha1","kind":"ToolAction","metadata":{"name":"report-2026-12-04","namespace":"ops"},
"spec":{"toolRef":{"name":"report"},"parameters":{"day":"2026-12-04"}}}`)
		apply := func() {
			cmd := exec.CommandContext(ctx, filepath.Join(root, "bin", "kubectl"), "--kubeconfig", cluster.Kubeconfig, "apply", "-f", "-")
			cmd.Stdin = bytes.NewReader(action)
			out, err := cmd.CombinedOutput()
			Expect(err).NotTo(HaveOccurred(), string(out))
		}
		apply()
		admin(ctx, "wait", "-n", "ops", "toolaction/report-2026-12-04", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=2m")
		var job batchv1.Job
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: "ops", Name: "report-2026-12-04"}, &job)).To(Succeed())
		jobUID := job.UID
		By("the Job completes, the TTL controller deletes it and the garbage collector its pod")
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: "ops", Name: "report-2026-12-04"}, &job))
		}).Should(BeTrue())
		Eventually(func() []corev1.Pod {
			var pods corev1.PodList
			Expect(k8s.List(ctx, &pods, client.InNamespace("ops"), client.MatchingLabels{"controller-uid": string(jobUID)})).To(Succeed())
			return pods.Items
		}).Should(BeEmpty())

		By("applying the intent again: answered from its record, no second Job")
		apply()
		Consistently(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: "ops", Name: "report-2026-12-04"}, &job))
		}, 15*time.Second).Should(BeTrue(), "the Job was made again")
		record(ctx, "kubernetesApply of a Job, removed by the TTL controller (its pod by the garbage collector), then the same ToolAction applied again", 1, 0, 0, 0, started)
	})

	It("holds a restored namespace's keys until its owner adopts the earlier life, then answers them from the archive: 0 dispatches", func(ctx SpecContext) {
		started := time.Now()
		const ns = "restored"
		createNamespace(ctx, ns)
		Expect(k8s.Create(ctx, chargeTool(ns, shop, v1alpha1.NonRepeatable, 0))).To(Succeed())
		keys := make([]string, 10)
		var saved strings.Builder
		for i := range keys {
			keys[i] = fmt.Sprintf("order-%d", 9001+i)
			saved.WriteString("---\n" + testenv.ChargeManifest(ns, keys[i], int64(1000+i), "cus_restored"))
		}
		manifest := filepath.Join(GinkgoT().TempDir(), "restored.yaml")
		Expect(os.WriteFile(manifest, []byte(saved.String()), 0o600)).To(Succeed())
		admin(ctx, "apply", "-f", manifest)
		admin(ctx, "wait", "-n", ns, "toolaction", "--all", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=2m")
		first := map[string]string{}
		for _, key := range keys {
			first[key] = admin(ctx, "get", "toolaction", key, "-n", ns, "-o", "jsonpath={.status.externalRef}")
		}
		var earlier corev1.Namespace
		Expect(k8s.Get(ctx, client.ObjectKey{Name: ns}, &earlier)).To(Succeed())

		By("the namespace controller deletes the namespace; the managers archive each record on its way out")
		deletion := time.Now()
		admin(ctx, "delete", "namespace", ns, "--timeout=3m")
		report("namespace deletion", deletion)

		By("restored from its saved YAML: the namespace, its Tool, its ToolActions without status")
		createNamespace(ctx, ns)
		Expect(k8s.Create(ctx, chargeTool(ns, shop, v1alpha1.NonRepeatable, 0))).To(Succeed())
		admin(ctx, "apply", "-f", manifest)
		for _, key := range keys {
			Eventually(func() string {
				return admin(ctx, "get", "toolaction", key, "-n", ns, "-o", `jsonpath={.status.phase}/{.status.conditions[?(@.type=="Reconciling")].reason}`)
			}, time.Minute).Should(Equal("Accepted/EarlierNamespaceKey"), key)
		}
		before := shop.stats(ctx)
		Consistently(func() int {
			now, sent := shop.stats(ctx), 0
			for _, key := range keys {
				sent += now.Requests[ns+"/"+key] - before.Requests[ns+"/"+key]
			}
			return sent
		}, 10*time.Second).Should(BeZero(), "a restored key held is never dispatched")

		By("the namespace's owner lists its earlier life and adopts it, with kubectl toolledger")
		owner := "restored-owner"
		bindRole(ctx, ns, owner, release+"-history-owner")
		lives := admin(ctx, "toolledger", "lives", "-n", ns, "--as="+owner)
		Expect(lives).To(ContainSubstring(string(earlier.UID)))
		adopted := admin(ctx, "toolledger", "lives", "adopt", "-n", ns, "--reason", "restored from the saved YAML", "--wait", "--as="+owner)
		Expect(adopted).To(ContainSubstring("Applied=True (Decided)"))
		decisions := admin(ctx, "get", "earlierlifedecisions", "-n", ns, "-o", `jsonpath={.items[0].metadata.annotations.toolledger\.dev/decided-by}`)
		Expect(decisions).To(Equal(owner), "the API server stamped who decided")

		dispatched := 0
		for _, key := range keys {
			Eventually(func() string {
				return admin(ctx, "get", "toolaction", key, "-n", ns, "-o", `jsonpath={.status.phase}/{.status.conditions[?(@.type=="Succeeded")].reason}/{.status.externalRef}/{.status.attempts}`)
			}, time.Minute).Should(Equal("Succeeded/SettledByArchive/"+first[key]+"/"), key, "settled with no attempt: status.attempts is omitted at zero")
			dispatched += shop.stats(ctx).Requests[ns+"/"+key] - before.Requests[ns+"/"+key]
		}
		Expect(dispatched).To(BeZero())
		record(ctx, "a namespace deleted (its records archived) and restored from its saved YAML: 10 keys held, then its owner adopts the earlier life and each is answered from the archive",
			len(keys), dispatched, 0, 0, started)
	})

	It("refuses to dispatch after helm rollback to a release without the archive, and dispatches no archived key again", func(ctx SpecContext) {
		started := time.Now()
		helm(ctx, "rollback", release, "1", "-n", releaseNamespace)
		var refusing corev1.Pod
		Eventually(func(g Gomega) {
			for _, pod := range managerPods(ctx) {
				if !slices.ContainsFunc(pod.Spec.Containers[0].Env, func(e corev1.EnvVar) bool { return e.Name == "TOOLLEDGER_ARCHIVE_DSN" }) &&
					pod.Status.Phase == corev1.PodRunning {
					refusing = pod
					return
				}
			}
			g.Expect(false).To(BeTrue(), "no manager of the rolled-back release runs yet")
		}, 3*time.Minute).Should(Succeed())
		Eventually(func() string {
			log, _ := kubectl(ctx, cluster.Kubeconfig, "logs", "-n", releaseNamespace, refusing.Name)
			return log
		}).Should(ContainSubstring("Refusing to dispatch new keys"))
		Consistently(func(g Gomega) {
			var pod corev1.Pod
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(&refusing), &pod)).To(Succeed())
			for _, c := range pod.Status.Conditions {
				if c.Type == corev1.PodReady {
					g.Expect(c.Status).To(Equal(corev1.ConditionFalse), "a manager without the archive is not ready")
				}
			}
		}, 20*time.Second).Should(Succeed())

		By("the agents repeat 50 archived keys: each answered from the archive, none sent again")
		before := shop.stats(ctx)
		agentConfig, err := cluster.UserKubeconfig("agent")
		Expect(err).NotTo(HaveOccurred())
		phases := runAgents(ctx, agentConfig, "agents", "load", 50, 8)
		after := shop.stats(ctx)
		resent := 0
		for key := range phases {
			resent += after.Requests["agents/"+key] - before.Requests["agents/"+key]
		}
		record(ctx, "helm rollback to the release without the archive: its managers refuse and are not ready; 50 archived keys repeated", len(phases), resent, 0, 0, started)
		for key, phase := range phases {
			Expect(phase).To(Equal(v1alpha1.PhaseSucceeded), key)
			Expect(after.Requests["agents/"+key]).To(Equal(before.Requests["agents/"+key]), "%s was sent again", key)
		}

		By("rolling forward to the archive again")
		helm(ctx, "rollback", release, "2", "-n", releaseNamespace, "--wait", "--timeout", "5m")
		admin(ctx, "rollout", "status", "-n", releaseNamespace, "deployment/"+release, "--timeout=3m")
	})

	It("serves the web console and the MCP gateway through their Services", func(ctx SpecContext) {
		frontEnds(ctx, shop)
	})

	// Last: it decommissions the release's archive.
	It("holds a reused name's old keys until an administrator releases them, and decommissions the archive per life", func(ctx SpecContext) {
		started := time.Now()
		const ns = "reused"
		createNamespace(ctx, ns)
		Expect(k8s.Create(ctx, chargeTool(ns, shop, v1alpha1.KeyProtected, 0))).To(Succeed())
		agent, err := sdk.NewClient(cluster.Admin)
		Expect(err).NotTo(HaveOccurred())
		for _, key := range []string{"invoice-1", "invoice-2"} {
			outcome, err := agent.Invoke(ctx, sdk.Request{Namespace: ns, Key: key, Tool: "charge",
				Parameters: map[string]any{"amount": 1000, "currency": "EUR", "customer": "cus_old_tenant"}})
			Expect(err).NotTo(HaveOccurred())
			Expect(outcome.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		}
		oldRef := admin(ctx, "get", "toolaction", "invoice-1", "-n", ns, "-o", "jsonpath={.status.externalRef}")
		var earlier corev1.Namespace
		Expect(k8s.Get(ctx, client.ObjectKey{Name: ns}, &earlier)).To(Succeed())
		admin(ctx, "delete", "namespace", ns, "--timeout=3m")

		By("a new tenant gets the name, with a provider account of its own, and charges under an old key")
		createNamespace(ctx, ns)
		account := deployDownstream(ctx, "payments-new-tenant")
		Expect(k8s.Create(ctx, chargeTool(ns, account, v1alpha1.KeyProtected, 5*time.Second))).To(Succeed())
		manifest := filepath.Join(GinkgoT().TempDir(), "new-tenant.yaml")
		Expect(os.WriteFile(manifest, []byte(testenv.ChargeManifest(ns, "invoice-1", 2500, "cus_new_tenant")+"---\n"+
			testenv.ChargeManifest(ns, "invoice-3", 2500, "cus_new_tenant")), 0o600)).To(Succeed())
		admin(ctx, "apply", "-f", manifest)
		Eventually(func() string {
			return admin(ctx, "get", "toolaction", "invoice-1", "-n", ns, "-o", `jsonpath={.status.phase}/{.status.conditions[?(@.type=="Reconciling")].reason}`)
		}, time.Minute).Should(Equal("Accepted/EarlierNamespaceKey"))
		held := admin(ctx, "get", "toolaction", "invoice-1", "-n", ns, "-o", `jsonpath={.status.conditions[?(@.type=="Reconciling")].message}`)
		Expect(held).NotTo(ContainSubstring(oldRef), "the new tenant does not see the old tenant's charge")

		By("the new tenant's owner may not release the old tenant's keys; an administrator does")
		bindRole(ctx, ns, "reused-owner", release+"-history-owner")
		refused, err := kubectl(ctx, cluster.Kubeconfig, "toolledger", "lives", "release", "-n", ns, "--earlier-life", string(earlier.UID),
			"--reason", "mine now", "--as=reused-owner")
		Expect(err).To(HaveOccurred(), refused)
		Expect(refused).To(ContainSubstring("takes the verb release on earlierlifedecisions"))
		Expect(k8s.Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "ledger-admin-history"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: release + "-history-admin"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "ledger-admin"}},
		})).To(Succeed())
		released := admin(ctx, "toolledger", "lives", "release", "-n", ns, "--earlier-life", string(earlier.UID),
			"--reason", "the name went to a new tenant", "--wait", "--as=ledger-admin")
		Expect(released).To(ContainSubstring("Applied=True (Decided)"))
		admin(ctx, "wait", "-n", ns, "toolaction/invoice-1", "toolaction/invoice-3", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=2m")
		newRef := admin(ctx, "get", "toolaction", "invoice-1", "-n", ns, "-o", "jsonpath={.status.externalRef}")
		Expect(newRef).NotTo(Equal(oldRef))
		Expect(account.stats(ctx).Requests).To(HaveKeyWithValue(ns+"/invoice-1", 1))

		By("the new tenant's records leave etcd for the archive")
		Eventually(func(g Gomega) []v1alpha1.ToolAction {
			var left v1alpha1.ToolActionList
			g.Expect(k8s.List(ctx, &left, client.InNamespace(ns))).To(Succeed())
			return left.Items
		}, 2*time.Minute).Should(BeEmpty())

		By("decommissioning the archive as docs/archive.md says, the owner's DSN on standard input")
		decommission := exec.CommandContext(ctx, filepath.Join(root, "bin", "kubectl"), "exec", "-i", "-n", releaseNamespace, "deploy/"+release, "--",
			"/manager", "decommission-archive", "--archive-dsn-file=-")
		decommission.Env = append(os.Environ(), "KUBECONFIG="+cluster.Kubeconfig)
		decommission.Stdin = strings.NewReader(theArchive.dsn(archiveOwner, "owner-secret"))
		out, err := decommission.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "%s", out)
		Expect(string(out)).To(ContainSubstring("The archive is decommissioned"))
		Expect(string(out)).To(MatchRegexp(`keys of earlier lives released: [1-9]`))
		var tombstones v1alpha1.TombstoneList
		Expect(k8s.List(ctx, &tombstones, client.InNamespace(ns))).To(Succeed())
		names := map[string]string{}
		for _, t := range tombstones.Items {
			names[t.Name] = t.Record.ExternalRef
		}
		Expect(names).To(HaveLen(2), "only the new tenant's keys are the namespace's Tombstones: %v", names)
		Expect(names).To(HaveKeyWithValue("invoice-1", newRef))
		Expect(names).To(HaveKey("invoice-3"))
		record(ctx, "a namespace name reused by a new tenant: an old key held until an administrator releases it, then the archive decommissioned per life (only the new tenant's keys become its Tombstones)",
			4, 0, 0, 0, started)
	})
})
