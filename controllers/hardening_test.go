package controllers_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/kubectlplugin"
	"github.com/toolledger/toolledger/internal/testenv"
)

// The bad-input suite: each input a tenant or a downstream can throw at the
// operator ends in a final, clearly worded error or a refused Tool, and
// meanwhile a healthy tool's actions are served exactly once. The manager's
// tools resolve only made-up names (egresstest.Hosts: metadata.test is
// 169.254.169.254, private.test 10.0.0.1, cluster.test 10.96.0.1) and its
// dialer refuses, and reports, any address outside 127.0.0.0/8: nothing
// here leaves loopback.
var _ = Describe("Bad input", func() {
	var (
		ctx context.Context
		ns  string
	)

	BeforeEach(func() {
		ctx = context.Background()
		ns = env.NewTenant()
	})

	It("ends each in a final, clear error or a refused Tool while a healthy tool's actions are served", func() {
		// A downstream that answers badly, on the allowed 127.0.0.1.
		escape := "ch_\x1b]0;owned\x07\x1b[2J"
		hostile := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			switch r.URL.Path {
			case "/huge":
				w.WriteHeader(http.StatusCreated)
				_, _ = fmt.Fprintf(w, `{"id": "ch_huge", "pad": "%s"}`, strings.Repeat("z", 10<<20))
			case "/error-body":
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write(bytes.Repeat([]byte("e"), 5<<10))
			case "/long-ref":
				w.WriteHeader(http.StatusCreated)
				_, _ = fmt.Fprintf(w, `{"id": "%s"}`, strings.Repeat("r", 2<<10))
			case "/escapes":
				w.WriteHeader(http.StatusCreated)
				id, _ := json.Marshal(escape)
				_, _ = fmt.Fprintf(w, `{"id": %s}`, id)
			}
		}))
		DeferCleanup(hostile.Close)

		// Listening on loopback, but outside the allowance (127.0.0.1/32).
		outside, err := net.Listen("tcp", "127.0.0.2:0")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(outside.Close)
		var reachedOutside atomic.Int32
		go func() {
			for {
				conn, err := outside.Accept()
				if err != nil {
					return
				}
				reachedOutside.Add(1)
				_ = conn.Close()
			}
		}()

		apiServer, err := url.Parse(cfg.Host)
		Expect(err).NotTo(HaveOccurred())
		createTool(ns, "charge")
		tool := func(name, url string, opts ...testenv.ToolOption) {
			GinkgoHelper()
			Expect(k8s.Create(ctx, testenv.NewTool(ns, name, url, append([]testenv.ToolOption{testenv.WithoutLookup()}, opts...)...))).To(Succeed())
		}
		tool("metadata", "http://metadata.test/latest/meta-data/iam/security-credentials/")
		tool("private", "http://private.test:8080/internal")
		tool("outside", "http://"+outside.Addr().String()+"/charges")
		tool("apiserver", cfg.Host+"/api/v1/namespaces/kube-system/secrets")
		tool("unlabelled", hostile.URL+"/huge", testenv.WithAuthSecret("payments", "token"))
		tool("ref-schema", hostile.URL+"/huge", testenv.WithParametersSchema(`{"type": "object", "properties": {"amount": {"$ref": "#/definitions/money"}}}`))
		tool("huge", hostile.URL+"/huge")
		tool("error-body", hostile.URL+"/error-body")
		tool("long-ref", hostile.URL+"/long-ref")
		tool("escapes", hostile.URL+"/escapes")
		Expect(k8s.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "payments"},
			StringData: map[string]string{"token": "Bearer sk_live_not_for_tools"},
		})).To(Succeed())

		// The healthy tool's actions go in with the bad ones.
		const healthy = 20
		var wg sync.WaitGroup
		for i := range healthy {
			wg.Go(func() {
				defer GinkgoRecover()
				Expect(k8s.Create(ctx, newAction(ns, fmt.Sprintf("order-%d", i), "charge", charge(100+i)))).To(Succeed())
			})
		}
		for _, name := range []string{"metadata", "private", "outside", "apiserver", "unlabelled", "ref-schema", "huge", "error-body", "long-ref", "escapes"} {
			Expect(k8s.Create(ctx, newAction(ns, "via-"+name, name, charge(1)))).To(Succeed())
		}
		Expect(k8s.Create(ctx, newAction(ns, "oversized", "charge",
			params(map[string]any{"blob": strings.Repeat("x", v1alpha1.MaxParametersBytes)})))).To(Succeed())
		wg.Wait()

		By("refusing egress where names resolve to metadata and private addresses, outside the allowance and at the API server")
		refused := map[string]string{
			"metadata":  "EgressRefused: egress to metadata.test (169.254.169.254:80) refused: 169.254.169.254 is in 169.254.0.0/16, the link-local range, where cloud metadata services listen; a cluster admin may allow it with the manager's --egress-allow",
			"private":   "EgressRefused: egress to private.test (10.0.0.1:8080) refused: 10.0.0.1 is in 10.0.0.0/8, the private range (RFC 1918); a cluster admin may allow it with the manager's --egress-allow",
			"outside":   fmt.Sprintf("EgressRefused: egress to %s refused: 127.0.0.2 is in 127.0.0.0/8, the loopback range; a cluster admin may allow it with the manager's --egress-allow", outside.Addr()),
			"apiserver": fmt.Sprintf("EgressRefused: egress to %s refused: it is the API server's own endpoint", apiServer.Host),
		}
		for name, message := range refused {
			failed := env.WaitForPhase(ns, "via-"+name, v1alpha1.PhaseFailed)
			Expect(failed.Status.Error.Class).To(Equal(v1alpha1.ErrorClassDenied), name)
			Expect(failed.Status.Error.Reason).To(Equal("EgressRefused"), name)
			Expect(failed.Status.Error.Message).To(Equal(message), name)
			Expect(failed.Status.Attempts).To(Equal(int32(1)), "%s: a refusal is final, never retried", name)
		}
		// An address in the URL is refused on the Tool already; a name only
		// when it is dialed.
		for name, message := range map[string]string{
			"outside":   fmt.Sprintf("spec.http.url: egress to %s refused: 127.0.0.2 is in 127.0.0.0/8, the loopback range; a cluster admin may allow it with the manager's --egress-allow", outside.Addr()),
			"apiserver": fmt.Sprintf("spec.http.url: egress to %s refused: it is the API server's own endpoint", apiServer.Host),
		} {
			Eventually(func(g Gomega) {
				ready := toolCondition(g, ns, name)
				g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
				g.Expect(ready.Reason).To(Equal("EgressRefused"))
				g.Expect(ready.Message).To(Equal(message))
			}).Should(Succeed(), name)
		}
		Expect(reachedOutside.Load()).To(BeZero(), "nothing connected to 127.0.0.2")

		By("reading no Secret that has not opted in to Tools")
		Eventually(func(g Gomega) {
			ready := toolCondition(g, ns, "unlabelled")
			g.Expect(ready.Reason).To(Equal("SecretNotUsable"))
			g.Expect(ready.Message).To(Equal("Secret " + ns + "/payments is not usable by Tools: only a Secret labelled toolledger.dev/tool-credential=true is"))
		}).Should(Succeed())
		waiting := env.WaitForPhase(ns, "via-unlabelled", v1alpha1.PhaseAccepted)
		Expect(meta.FindStatusCondition(waiting.Status.Conditions, v1alpha1.ConditionReconciling).Message).To(Equal(
			`tool "unlabelled" cannot be used yet: Secret ` + ns + `/payments is not usable by Tools: only a Secret labelled toolledger.dev/tool-credential=true is`))
		Expect(waiting.Status.Attempts).To(BeZero())

		By("refusing a $ref schema on the Tool, and its actions finally")
		Eventually(func(g Gomega) {
			ready := toolCondition(g, ns, "ref-schema")
			g.Expect(ready.Reason).To(Equal("UnsupportedSchema"))
			g.Expect(ready.Message).To(Equal(`spec.parametersSchema: parametersSchema.properties[amount]: "$ref" is not supported: write the referenced schema in place`))
		}).Should(Succeed())
		schemaFailed := env.WaitForPhase(ns, "via-ref-schema", v1alpha1.PhaseFailed)
		Expect(schemaFailed.Status.Error.Reason).To(Equal("InvalidToolContract"))
		Expect(schemaFailed.Status.Error.Message).To(Equal(`tool "ref-schema": parametersSchema.properties[amount]: "$ref" is not supported: write the referenced schema in place`))

		By("failing parameters over the limit before any dispatch")
		oversized := env.WaitForPhase(ns, "oversized", v1alpha1.PhaseFailed)
		Expect(oversized.Status.Error.Reason).To(Equal("InvalidParameters"))
		Expect(oversized.Status.Error.Message).To(Equal(fmt.Sprintf(
			"spec.parameters is %d bytes encoded, over the limit of 1048576 bytes (1 MiB)", len(`{"blob":""}`)+v1alpha1.MaxParametersBytes)))
		Expect(oversized.Status.Attempts).To(BeZero())
		Expect(downstream.Requests(keyOf(ns, "oversized"))).To(BeZero())

		By("keeping what the ledger can hold of bad answers, and saying what it dropped")
		huge := env.WaitForPhase(ns, "via-huge", v1alpha1.PhaseSucceeded)
		Expect(huge.Status.ExternalRef).To(BeEmpty())
		Expect(warningNotes(ctx, ns, "via-huge")).To(ContainElement("response exceeds 1048576 bytes; no external id or result recorded"))

		errorBody := env.WaitForPhase(ns, "via-error-body", v1alpha1.PhaseFailed)
		sum := sha256.Sum256(bytes.Repeat([]byte("e"), 5<<10))
		Expect(errorBody.Status.Error.Reason).To(Equal("HTTP400"))
		Expect(errorBody.Status.Error.Message).To(Equal("HTTP400: downstream answered 400; body of 5120 bytes, sha256:" + hex.EncodeToString(sum[:8]) + ", not stored"))

		longRef := env.WaitForPhase(ns, "via-long-ref", v1alpha1.PhaseSucceeded)
		Expect(longRef.Status.ExternalRef).To(BeEmpty())
		Expect(warningNotes(ctx, ns, "via-long-ref")).To(ContainElement("the downstream's external reference of 2048 bytes exceeds 512 bytes; not stored"))

		escaped := env.WaitForPhase(ns, "via-escapes", v1alpha1.PhaseSucceeded)
		Expect(escaped.Status.ExternalRef).To(Equal(escape), "stored as the downstream sent it")
		var out bytes.Buffer
		code := kubectlplugin.Run(ctx, genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &out},
			[]string{"--kubeconfig", env.Kubeconfig, "-n", ns, "status", "via-escapes"})
		Expect(code).To(Equal(kubectlplugin.ExitOK), out.String())
		Expect(out.String()).NotTo(ContainSubstring("\x1b"), "the console writes no escape sequence to the terminal")
		Expect(out.String()).To(ContainSubstring(`ch_\x1b]0;owned\a\x1b[2J`))

		By("serving the healthy tool's actions exactly once all along")
		for i := range healthy {
			name := fmt.Sprintf("order-%d", i)
			env.WaitForPhase(ns, name, v1alpha1.PhaseSucceeded)
			Expect(downstream.Requests(keyOf(ns, name))).To(Equal(1), name)
		}
		Expect(testenv.EgressViolations()).To(BeEmpty(), "no dial outside 127.0.0.0/8 was asked of the dialer")
	})

	It("refuses a 17th compensation before dispatch, so that compensatedBy stays within its bound", func() {
		var refunds atomic.Int32
		refund := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			n := refunds.Add(1)
			w.WriteHeader(http.StatusCreated)
			_, _ = fmt.Fprintf(w, `{"id":"re_%d"}`, n)
		}))
		DeferCleanup(refund.Close)
		createTool(ns, "charge")
		Expect(k8s.Create(ctx, testenv.NewTool(ns, "refund", refund.URL, testenv.WithOperation("payments.refund"), testenv.WithoutLookup()))).To(Succeed())
		Expect(k8s.Create(ctx, newAction(ns, "order-1", "charge", charge(1600)))).To(Succeed())
		env.WaitForPhase(ns, "order-1", v1alpha1.PhaseSucceeded)

		compensation := func(i int) *v1alpha1.ToolAction {
			a := newAction(ns, fmt.Sprintf("order-1-refund-%d", i), "refund", params(map[string]any{"amount": 100}))
			a.Spec.Compensates = "order-1"
			return a
		}
		for i := 1; i <= v1alpha1.MaxCompensations; i++ {
			Expect(k8s.Create(ctx, compensation(i))).To(Succeed())
		}
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ns, "order-1").Status.CompensatedBy).To(HaveLen(v1alpha1.MaxCompensations))
		}).Should(Succeed())

		Expect(k8s.Create(ctx, compensation(17))).To(Succeed())
		failed := env.WaitForPhase(ns, "order-1-refund-17", v1alpha1.PhaseFailed)
		Expect(failed.Status.Error.Reason).To(Equal("CompensationTargetInvalid"))
		Expect(failed.Status.Error.Message).To(Equal(`spec.compensates: ToolAction "order-1" has 16 compensations already, the most it records`))
		Expect(refunds.Load()).To(Equal(int32(v1alpha1.MaxCompensations)), "the 17th was never sent")
		Expect(env.Get(ns, "order-1").Status.CompensatedBy).To(HaveLen(v1alpha1.MaxCompensations))
	})
})

// warningNotes are the notes of the Warning events about the action.
func warningNotes(ctx context.Context, namespace, action string) []string {
	var events eventsv1.EventList
	Expect(k8s.List(ctx, &events, client.InNamespace(namespace))).To(Succeed())
	var notes []string
	for _, e := range events.Items {
		if e.Regarding.Name == action && e.Type == corev1.EventTypeWarning {
			notes = append(notes, e.Note)
		}
	}
	return notes
}
