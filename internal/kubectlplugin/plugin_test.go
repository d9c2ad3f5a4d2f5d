package kubectlplugin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/internal/testenv/specenv"
)

var _ = Describe("kubectl toolledger status", func() {
	It("prints the timeline of an action whose outcome was unknown and found by lookup", func() {
		ns := env.NewTenant()
		newTool(ns, v1alpha1.KeyProtected)
		downstream.InjectFault(demo.Fault{Mode: demo.FaultDropAfterCommit, Count: 1})
		createAction(ns, "order-found")
		done := env.WaitForPhase(ns, "order-found", v1alpha1.PhaseSucceeded)
		charged, ok := downstream.Charge(ns + "/order-found")
		Expect(ok).To(BeTrue())

		r := in(ns, "status", "order-found")
		Expect(r.code).To(Equal(0), r.stderr)
		Expect(r.stdout).To(MatchRegexp(`(?m)^Phase:\s+Succeeded$`))
		Expect(r.stdout).To(MatchRegexp(`(?m)^External ref:\s+%s$`, charged.ID))
		Expect(r.stdout).To(MatchRegexp(`(?m)^Idempotency key:\s+%s/order-found$`, ns))
		Expect(r.stdout).To(MatchRegexp(`(?m)^Request digest:\s+sha256:[0-9a-f]{64}$`))
		Expect(r.stdout).To(MatchRegexp(`(?m)^Claim:\s+executor plugin-suite, attempt 1, lease expiry \S+Z \(.+\)$`))
		Expect(r.stdout).To(MatchRegexp(`(?m)^  Succeeded\s+True\s+FoundByLookup\s+`))
		Expect(timeline(r.stdout)).To(Equal([]string{
			"(new) → Executing Executing 1 plugin-suite",
			"Executing → Unknown OutcomeUnknown 1 plugin-suite",
			"Unknown → Succeeded FoundByLookup 1 plugin-suite",
		}))
		Expect(r.stdout).To(ContainSubstring(done.Status.History[2].Message), "each transition's message")

		r = in(ns, "status", "order-found", "-o", "json")
		Expect(r.code).To(Equal(0), r.stderr)
		var fromJSON v1alpha1.ToolAction
		Expect(json.Unmarshal([]byte(r.stdout), &fromJSON)).To(Succeed())
		Expect(fromJSON.Kind).To(Equal("ToolAction"))
		Expect(fromJSON.APIVersion).To(Equal("toolledger.dev/v1alpha1"))
		Expect(fromJSON.ManagedFields).To(BeEmpty())
		Expect(fromJSON.Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		Expect(fromJSON.Status.ExternalRef).To(Equal(charged.ID))
		Expect(specenv.Reasons(&fromJSON)).To(Equal([]string{"Executing", "OutcomeUnknown", "FoundByLookup"}))

		r = in(ns, "status", "order-found", "-o", "yaml")
		Expect(r.code).To(Equal(0), r.stderr)
		var fromYAML v1alpha1.ToolAction
		Expect(yaml.UnmarshalStrict([]byte(r.stdout), &fromYAML)).To(Succeed())
		Expect(fromYAML.Status).To(Equal(fromJSON.Status))
	})

	It("exits 1 with a clear message for a missing key, and honours --namespace and --context", func() {
		ns := env.NewTenant()
		newTool(ns, v1alpha1.KeyProtected)
		createAction(ns, "order-here")
		env.WaitForPhase(ns, "order-here", v1alpha1.PhaseSucceeded)

		r := in(ns, "status", "order-nowhere")
		Expect(r.code).To(Equal(1))
		Expect(r.stdout).To(BeEmpty())
		Expect(r.stderr).To(Equal(fmt.Sprintf("error: ToolAction \"order-nowhere\" not found in namespace %q, and no Tombstone keeps that key\n", ns)))

		By("reading the namespace from --namespace, else the context, else default")
		r = plugin("status", "order-here", "--kubeconfig", kubeconfig)
		Expect(r.code).To(Equal(1))
		Expect(r.stderr).To(ContainSubstring(`ToolAction "order-here" not found in namespace "default"`))
		Expect(plugin("status", "order-here", "--kubeconfig", kubeconfig, "--namespace", ns).code).To(Equal(0))

		By("using the kubeconfig's current context unless --context names another")
		setContextNamespace(ns)
		r = plugin("status", "order-here", "--kubeconfig", twoContexts)
		Expect(r.code).To(Equal(1))
		Expect(r.stderr).To(ContainSubstring(strings.TrimPrefix(unreachableServer, "https://")))
		r = plugin("status", "order-here", "--kubeconfig", twoContexts, "--context", workingContext)
		Expect(r.code).To(Equal(0), r.stderr)
		Expect(r.stdout).To(MatchRegexp(`(?m)^Namespace:\s+%s$`, ns), "the namespace of the selected context")
		r = plugin("queue", "--kubeconfig", twoContexts, "--context", workingContext)
		Expect(r.code).To(Equal(0), r.stderr)
		Expect(r.stderr).To(Equal(fmt.Sprintf("No ToolActions need attention in namespace %q.\n", ns)))
	})
})

var _ = Describe("kubectl toolledger queue and resolve", func() {
	It("lists escalated actions oldest first, and a resolution closes one", func() {
		ns := env.NewTenant()
		newTool(ns, v1alpha1.NonRepeatable)

		downstream.InjectFault(demo.Fault{Mode: demo.FaultDropAfterCommit, Count: 1})
		createAction(ns, "order-older")
		older := env.WaitForPhase(ns, "order-older", v1alpha1.PhaseEscalated)
		Expect(older.Status.UnknownSince).NotTo(BeNil())
		// The API stores seconds: let the second of the first escalation pass,
		// so that the two are told apart by age alone.
		time.Sleep(time.Until(older.Status.UnknownSince.Add(1100 * time.Millisecond)))
		downstream.InjectFault(demo.Fault{Mode: demo.FaultDropAfterCommit, Count: 1})
		createAction(ns, "order-newer")
		newer := env.WaitForPhase(ns, "order-newer", v1alpha1.PhaseEscalated)
		Expect(newer.Status.UnknownSince.After(older.Status.UnknownSince.Time)).To(BeTrue())

		r := in(ns, "queue")
		Expect(r.code).To(Equal(0), r.stderr)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		Expect(lines).To(HaveLen(3))
		Expect(lines[0]).To(MatchRegexp(`^NAME\s+PHASE\s+AGE\s+TOOL\s+ATTEMPTS\s+LOOKUPS\s+REASON\s+MESSAGE$`))
		Expect(lines[1]).To(MatchRegexp(`^order-older\s+Escalated\s+\d+s\s+charge\s+1\s+0\s+\S+\s+the outcome of attempt 1 is unknown and a NonRepeatable tool`))
		Expect(lines[2]).To(MatchRegexp(`^order-newer\s+Escalated\s+\d+s\s+charge\s+1\s+0\s`))

		r = plugin("queue", "-A", "--kubeconfig", kubeconfig)
		Expect(r.code).To(Equal(0), r.stderr)
		Expect(r.stdout).To(MatchRegexp(`^NAMESPACE\s+NAME\s+PHASE\s+AGE`))
		Expect(r.stdout).To(MatchRegexp(`(?s)\n%s\s+order-older\s+Escalated.*\n%s\s+order-newer\s+Escalated`, ns, ns))

		r = in(ns, "queue", "-o", "json")
		Expect(r.code).To(Equal(0), r.stderr)
		var queue struct {
			Items []map[string]any `json:"items"`
		}
		Expect(json.Unmarshal([]byte(r.stdout), &queue)).To(Succeed())
		Expect(queue.Items).To(HaveLen(2))
		first := queue.Items[0]
		Expect(first).To(HaveKeyWithValue("namespace", ns))
		Expect(first).To(HaveKeyWithValue("name", "order-older"))
		Expect(first).To(HaveKeyWithValue("tool", "charge"))
		Expect(first).To(HaveKeyWithValue("phase", "Escalated"))
		Expect(first).To(HaveKeyWithValue("since", older.Status.UnknownSince.UTC().Format(time.RFC3339)))
		Expect(first).To(HaveKeyWithValue("attempts", BeNumerically("==", 1)))
		Expect(first).To(HaveKeyWithValue("lookups", BeNumerically("==", 0)))
		Expect(first).To(HaveKeyWithValue("ageSeconds", BeNumerically(">=", 1)))
		Expect(first).To(HaveKeyWithValue("reason", older.Status.Error.Reason))
		Expect(first).To(HaveKeyWithValue("message", older.Status.Error.Message))
		Expect(queue.Items[1]).To(HaveKeyWithValue("name", "order-newer"))

		r = in(ns, "queue", "-o", "yaml")
		Expect(r.code).To(Equal(0), r.stderr)
		var fromYAML struct {
			Items []struct {
				Name  string `json:"name"`
				Phase string `json:"phase"`
			} `json:"items"`
		}
		Expect(yaml.Unmarshal([]byte(r.stdout), &fromYAML)).To(Succeed())
		Expect(fromYAML.Items).To(HaveLen(2))
		Expect(fromYAML.Items[0].Name).To(Equal("order-older"))

		By("refusing an invalid resolution before anything is created")
		charged, ok := downstream.Charge(ns + "/order-older")
		Expect(ok).To(BeTrue())
		r = in(ns, "resolve", "order-older", "--attempt", "1", "--outcome", "Succeeded", "--external-ref", charged.ID)
		Expect(r.code).To(Equal(1))
		Expect(r.stderr).To(ContainSubstring("--reason is required"))
		r = in(ns, "resolve", "order-older", "--attempt", "1", "--outcome", "Succeeded", "--reason", "found it")
		Expect(r.code).To(Equal(1))
		Expect(r.stderr).To(ContainSubstring("--outcome Succeeded needs --external-ref"))
		Expect(r.stderr).To(ContainSubstring("nothing was created"))
		r = in(ns, "resolve", "order-older", "--outcome", "Failed", "--reason", "no charge")
		Expect(r.code).To(Equal(1))
		Expect(r.stderr).To(ContainSubstring("--attempt is required: the attempt you judged, as 'kubectl toolledger status KEY' shows it"))
		r = in(ns, "resolve", "order-older", "--attempt", "2", "--outcome", "RetrySafe", "--reason", "judged on a page of another attempt")
		Expect(r.code).To(Equal(1))
		Expect(r.stderr).To(ContainSubstring(`ToolAction "order-older" is at attempt 1 (Escalated), not the attempt 2 you judged: a later attempt may have applied; review it again; nothing was created`))
		Expect(resolutions(ns)).To(BeEmpty())

		By("closing the older action with a resolution")
		r = in(ns, "resolve", "order-older", "--attempt", "1", "--outcome", "Succeeded", "--external-ref", charged.ID,
			"--reason", "found the charge in the provider's dashboard", "--wait", "--timeout", "20s")
		Expect(r.code).To(Equal(0), r.stderr)
		created := resolutions(ns)
		Expect(created).To(HaveLen(1))
		name := created[0].Name
		Expect(name).To(HavePrefix("order-older-resolution-"))
		Expect(r.stdout).To(ContainSubstring("toolresolution.toolledger.dev/" + name + " created"))
		Expect(r.stdout).To(ContainSubstring("Applied=True (Applied): applied to ToolAction order-older"))
		Expect(r.stdout).To(ContainSubstring("ToolAction order-older is now Succeeded"))

		r = in(ns, "status", "order-older")
		Expect(r.code).To(Equal(0), r.stderr)
		Expect(r.stdout).To(MatchRegexp(`(?m)^Phase:\s+Succeeded$`))
		Expect(r.stdout).To(MatchRegexp(`(?m)^External ref:\s+%s$`, charged.ID))
		Expect(timeline(r.stdout)).To(Equal([]string{
			"(new) → Executing Executing 1 plugin-suite",
			"Executing → Unknown OutcomeUnknown 1 plugin-suite",
			"Unknown → Escalated OutcomeUnknown 1 plugin-suite",
			"Escalated → Succeeded Resolved 1 toolresolution/" + name,
		}))

		r = in(ns, "queue")
		Expect(r.code).To(Equal(0), r.stderr)
		Expect(r.stdout).NotTo(ContainSubstring("order-older"))
		Expect(r.stdout).To(ContainSubstring("order-newer"))

		By("refusing a resolution for an action that is no longer in doubt")
		r = in(ns, "resolve", "order-older", "--attempt", "1", "--outcome", "Failed", "--reason", "second thoughts", "-o", "json")
		Expect(r.code).To(Equal(1))
		Expect(r.stdout).To(BeEmpty())
		Expect(r.stderr).To(ContainSubstring(`ToolAction "order-older" is Succeeded; only Unknown or Escalated actions take a resolution; nothing was created`))
		Expect(resolutions(ns)).To(HaveLen(1))

		By("printing the resolution as JSON when asked")
		r = in(ns, "resolve", "order-newer", "--attempt", "1", "--outcome", "Failed", "--reason", "provider has no record", "--name", "order-newer-checked", "--wait", "-o", "json")
		Expect(r.code).To(Equal(0), r.stderr)
		var resolution v1alpha1.ToolResolution
		Expect(json.Unmarshal([]byte(r.stdout), &resolution)).To(Succeed())
		Expect(resolution.Kind).To(Equal("ToolResolution"))
		Expect(resolution.Name).To(Equal("order-newer-checked"))
		Expect(resolution.Spec.Outcome).To(Equal(v1alpha1.ResolvedFailed))
		Expect(resolution.Status.Conditions).To(ContainElement(And(
			HaveField("Type", v1alpha1.ConditionApplied), HaveField("Status", metav1.ConditionTrue))))
		Expect(env.Get(ns, "order-newer").Status.Phase).To(Equal(v1alpha1.PhaseFailed))
	})
})

// newTool creates the payments tool "charge" on the suite's downstream with
// a lookup by key and a short timeout, so that an unknown outcome is looked
// up after a second; opts change it further.
func newTool(namespace string, class v1alpha1.IdempotencyClass, opts ...testenv.ToolOption) {
	GinkgoHelper()
	env.CreateTool(namespace, "charge", append([]testenv.ToolOption{testenv.WithClass(class), testenv.WithTimeout(time.Second),
		testenv.WithKeyLookup(), testenv.WithBackoff(200*time.Millisecond, time.Second)}, opts...)...)
}

func createAction(namespace, name string) {
	GinkgoHelper()
	Expect(k8s.Create(context.Background(), &v1alpha1.ToolAction{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: v1alpha1.ToolActionSpec{
			ToolRef: v1alpha1.ToolReference{Name: "charge"},
			Parameters: map[string]apiextensionsv1.JSON{
				"amount":   {Raw: []byte("1000")},
				"currency": {Raw: []byte(`"EUR"`)},
			},
		},
	})).To(Succeed())
}

func resolutions(namespace string) []v1alpha1.ToolResolution {
	GinkgoHelper()
	var list v1alpha1.ToolResolutionList
	Expect(k8s.List(context.Background(), &list, client.InNamespace(namespace))).To(Succeed())
	return list.Items
}

// timelineRow is a row of the status history table: time, transition,
// reason, attempt and executor (the message is left out).
var timelineRow = regexp.MustCompile(`(?m)^  (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)\s+(\S+ → \S+)\s+(\S+)\s+(\d+)\s+(\S+)`)

// timeline returns the transitions of the printed history, in order, as
// "from → to reason attempt executor".
func timeline(status string) []string {
	var out []string
	for _, m := range timelineRow.FindAllStringSubmatch(status, -1) {
		out = append(out, strings.Join(m[2:], " "))
	}
	return out
}

var _ = Describe("kubectl toolledger approvals, status and approve", func() {
	It("show every parameter an approver's decision sends, marking those outside the request digest", func() {
		ns := env.NewTenant()
		newTool(ns, v1alpha1.KeyProtected, testenv.WithApprovalRequired(), testenv.WithConsequentialFields("/amount"))
		createAction(ns, "order-held")
		waiting := env.WaitForPhase(ns, "order-held", v1alpha1.PhaseAwaitingApproval)

		By("listing it: the parameters in the digest, and those sent beside them")
		r := in(ns, "approvals")
		Expect(r.code).To(Equal(0), r.stderr)
		Expect(r.stdout).To(MatchRegexp(`(?m)^NAME\s+AGE\s+TOOL\s+REQUESTED-BY\s+DIGEST\s+IN-DIGEST\s+NOT-IN-DIGEST$`))
		Expect(r.stdout).To(MatchRegexp(`(?m)^order-held\s+\S+\s+charge\s+\S+\s+%s\s+/amount=1000\s+/currency="EUR"$`, waiting.Status.RequestDigest))

		r = in(ns, "approvals", "-o", "json")
		Expect(r.code).To(Equal(0), r.stderr)
		var listed struct {
			Items []struct {
				Parameters []struct {
					Path     string          `json:"path"`
					Value    json.RawMessage `json:"value"`
					InDigest bool            `json:"inDigest"`
				} `json:"parameters"`
			} `json:"items"`
		}
		Expect(json.Unmarshal([]byte(r.stdout), &listed)).To(Succeed())
		Expect(listed.Items).To(HaveLen(1))
		Expect(listed.Items[0].Parameters).To(HaveLen(2))
		Expect(listed.Items[0].Parameters[0].Path).To(Equal("/amount"))
		Expect(listed.Items[0].Parameters[0].InDigest).To(BeTrue())
		Expect(listed.Items[0].Parameters[1].Path).To(Equal("/currency"))
		Expect(string(listed.Items[0].Parameters[1].Value)).To(Equal(`"EUR"`))
		Expect(listed.Items[0].Parameters[1].InDigest).To(BeFalse())

		By("showing its record: one line a parameter")
		r = in(ns, "status", "order-held")
		Expect(r.code).To(Equal(0), r.stderr)
		Expect(r.stdout).To(MatchRegexp(`(?m)^  PARAMETER\s+IN-DIGEST\s+VALUE$`))
		Expect(r.stdout).To(MatchRegexp(`(?m)^  /amount\s+yes\s+1000$`))
		Expect(r.stdout).To(MatchRegexp(`(?m)^  /currency\s+no\s+"EUR"$`))

		By("deciding about it: the decision repeats both")
		r = in(ns, "approve", "order-held", "--digest", waiting.Status.RequestDigest, "--reason", "checked")
		Expect(r.code).To(Equal(0), r.stderr)
		Expect(r.stdout).To(ContainSubstring("  in digest:     /amount=1000\n"))
		Expect(r.stdout).To(ContainSubstring("  not in digest: /currency=\"EUR\"\n"))
		// This suite's API server stamps no approver, so the approval is
		// not applied: nothing is sent.
		Expect(downstream.Requests(ns + "/order-held")).To(Equal(0))
	})
})
