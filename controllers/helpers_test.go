package controllers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// newTenant creates a namespace of its own for one spec, so that keys and
// downstream counters of different specs never meet.
func newTenant() string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "tenant-"}}
	Expect(k8s.Create(context.Background(), ns)).To(Succeed())
	return ns.Name
}

// newTool creates a payments tool that talks to the suite's downstream.
func newTool(namespace string, mutate ...func(*v1alpha1.Tool)) {
	tool := &v1alpha1.Tool{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "charge"},
		Spec: v1alpha1.ToolSpec{
			Operation:        "payments.charge",
			Version:          "v1",
			IdempotencyClass: v1alpha1.KeyProtected,
			HTTP: &v1alpha1.HTTPAdapter{
				URL:     httpServer.URL + "/charges",
				Timeout: &metav1.Duration{Duration: 5 * time.Second},
				Lookup:  &v1alpha1.HTTPLookup{URL: httpServer.URL + "/charges/by-key/{key}"},
				Response: v1alpha1.HTTPResponse{
					ExternalIDPointer: "/id",
					ResultPointers:    []string{"/status", "/amount", "/currency"},
				},
			},
			Retry: v1alpha1.RetryPolicy{
				MaxAttempts:    5,
				InitialBackoff: &metav1.Duration{Duration: 100 * time.Millisecond},
				MaxBackoff:     &metav1.Duration{Duration: time.Second},
			},
		},
	}
	for _, m := range mutate {
		m(tool)
	}
	Expect(k8s.Create(context.Background(), tool)).To(Succeed())
}

func params(members map[string]any) map[string]apiextensionsv1.JSON {
	out := make(map[string]apiextensionsv1.JSON, len(members))
	for k, v := range members {
		raw, err := json.Marshal(v)
		Expect(err).NotTo(HaveOccurred())
		out[k] = apiextensionsv1.JSON{Raw: raw}
	}
	return out
}

func charge(amount int) map[string]apiextensionsv1.JSON {
	return params(map[string]any{"amount": amount, "currency": "EUR", "customer": "cus_42"})
}

func newAction(namespace, name, tool string, parameters map[string]apiextensionsv1.JSON) *v1alpha1.ToolAction {
	return &v1alpha1.ToolAction{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: v1alpha1.ToolActionSpec{
			ToolRef:    v1alpha1.ToolReference{Name: tool},
			Parameters: parameters,
		},
	}
}

// waitForPhase waits until the action reaches the phase and returns it.
func waitForPhase(namespace, name string, phase v1alpha1.Phase) *v1alpha1.ToolAction {
	GinkgoHelper()
	var action v1alpha1.ToolAction
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, &action)).To(Succeed())
		g.Expect(action.Status.Phase).To(Equal(phase), "status: %+v", action.Status)
	}).Should(Succeed())
	return &action
}

func conditionStatus(action *v1alpha1.ToolAction, conditionType string) metav1.ConditionStatus {
	for _, c := range action.Status.Conditions {
		if c.Type == conditionType {
			return c.Status
		}
	}
	return "absent"
}

func keyOf(namespace, name string) string { return namespace + "/" + name }

// kubectl runs the real kubectl against the suite's API server.
func kubectl(args ...string) (string, error) {
	path, err := exec.LookPath("kubectl")
	Expect(err).NotTo(HaveOccurred(), "kubectl must be on PATH for the CLI specs")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.String(), err
}

func writeManifest(content string) string {
	path := filepath.Join(GinkgoT().TempDir(), "action.yaml")
	Expect(os.WriteFile(path, []byte(content), 0o600)).To(Succeed())
	return path
}

func chargeManifest(namespace, name string, amount int) string {
	return fmt.Sprintf(`apiVersion: toolledger.dev/v1alpha1
kind: ToolAction
metadata:
  name: %s
  namespace: %s
spec:
  toolRef:
    name: charge
  parameters:
    amount: %d
    currency: EUR
    customer: cus_42
`, name, namespace, amount)
}

// transitions summarises the history as "to/reason" entries.
func transitions(action *v1alpha1.ToolAction) []string {
	out := make([]string, 0, len(action.Status.History))
	for _, t := range action.Status.History {
		out = append(out, string(t.To)+"/"+t.Reason)
	}
	return out
}
