package controllers_test

import (
	"encoding/json"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/testenv"
)

// newTool creates the payments tool "charge" that createTool describes.
func newTool(namespace string, opts ...testenv.ToolOption) {
	GinkgoHelper()
	createTool(namespace, "charge", opts...)
}

// createTool creates a payments tool on the suite's downstream with a lookup
// by key, three result fields and quick retries; opts change it further.
func createTool(namespace, name string, opts ...testenv.ToolOption) {
	GinkgoHelper()
	defaults := []testenv.ToolOption{
		testenv.WithTimeout(5 * time.Second),
		testenv.WithKeyLookup(),
		testenv.WithResultPointers("/status", "/amount", "/currency"),
		testenv.WithMaxAttempts(5),
		testenv.WithBackoff(100*time.Millisecond, time.Second),
	}
	env.CreateTool(namespace, name, append(defaults, opts...)...)
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

func conditionStatus(action *v1alpha1.ToolAction, conditionType string) metav1.ConditionStatus {
	for _, c := range action.Status.Conditions {
		if c.Type == conditionType {
			return c.Status
		}
	}
	return "absent"
}

func keyOf(namespace, name string) string { return namespace + "/" + name }

func chargeManifest(namespace, name string, amount int) string {
	return testenv.ChargeManifest(namespace, name, int64(amount), "cus_42")
}

// transitions summarises the history as "to/reason" entries.
func transitions(action *v1alpha1.ToolAction) []string {
	out := make([]string, 0, len(action.Status.History))
	for _, t := range action.Status.History {
		out = append(out, string(t.To)+"/"+t.Reason)
	}
	return out
}
