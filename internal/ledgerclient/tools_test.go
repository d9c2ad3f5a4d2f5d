package ledgerclient

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// toolsAPI serves one ClusterTool and namespaces with their labels.
func toolsAPI(t *testing.T, clusterTool v1alpha1.ClusterTool, namespaces map[string]map[string]string) *Ledger {
	t.Helper()
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var answer any
		namespace, isNamespace := strings.CutPrefix(r.URL.Path, "/api/v1/namespaces/")
		switch labels, known := namespaces[namespace]; {
		case r.URL.Path == "/apis/toolledger.dev/v1alpha1/clustertools/"+clusterTool.Name:
			answer = clusterTool
		case isNamespace && known:
			answer = corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
				ObjectMeta: metav1.ObjectMeta{Name: namespace, Labels: labels}}
		default:
			t.Errorf("unexpected request %s %s", r.Method, r.URL.Path)
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(answer); err != nil {
			t.Errorf("cannot encode the answer: %v", err)
		}
	}))
	t.Cleanup(server.Close)
	ledger, err := NewLedger(&rest.Config{Host: server.URL}, "test")
	if err != nil {
		t.Fatal(err)
	}
	return ledger
}

// A ClusterTool is an action's tool only where its namespaceSelector admits
// the action's namespace, as the controllers decide: one that does not
// admit shop lends its consequentialFields to no action of shop, which are
// then marked as for a missing tool (every parameter in the digest).
func TestParametersOfAClusterToolFollowItsNamespaceSelector(t *testing.T) {
	platform := platformCharge()
	action := platformAction("shop")
	tests := []struct {
		name       string
		shopLabels map[string]string
		inDigest   []bool
	}{
		{name: "admitted", shopLabels: map[string]string{"tier": "platform"}, inDigest: []bool{true, false}},
		{name: "not admitted", shopLabels: map[string]string{"tier": "tenant"}, inDigest: []bool{true, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ledger := toolsAPI(t, platform, map[string]map[string]string{"shop": tt.shopLabels})
			params, err := ledger.Parameters(t.Context(), action)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.inDigest, inDigest(params)); diff != "" {
				t.Errorf("IN-DIGEST of /amount, /memo (-want +got):\n%s", diff)
			}
		})
	}
}

// The approvals list reads each tool once, a ClusterTool once per
// namespace: whether it admits one namespace says nothing of another.
func TestApprovalsReadAClusterToolPerNamespace(t *testing.T) {
	ledger := toolsAPI(t, platformCharge(), map[string]map[string]string{"shop": {"tier": "platform"}, "billing": {"tier": "tenant"}})
	approvals, err := BuildApprovals(t.Context(), ledger, []v1alpha1.ToolAction{*platformAction("shop"), *platformAction("billing")}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]bool{}
	for _, item := range approvals.Items {
		got[item.Namespace] = inDigest(item.Parameters)
	}
	if diff := cmp.Diff(map[string][]bool{"shop": {true, false}, "billing": {true, true}}, got); diff != "" {
		t.Errorf("IN-DIGEST of /amount, /memo by namespace (-want +got):\n%s", diff)
	}
}

func inDigest(params []Parameter) []bool {
	var marks []bool
	for _, p := range params {
		marks = append(marks, p.InDigest)
	}
	return marks
}

// platformCharge is a ClusterTool for the namespaces labelled
// tier=platform, whose digest covers /amount.
func platformCharge() v1alpha1.ClusterTool {
	return v1alpha1.ClusterTool{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.KindClusterTool},
		ObjectMeta: metav1.ObjectMeta{Name: "platform-charge"},
		Spec: v1alpha1.ClusterToolSpec{
			ToolSpec:          v1alpha1.ToolSpec{ConsequentialFields: []string{"/amount"}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "platform"}},
		},
	}
}

// platformAction is an action of platformCharge in namespace.
func platformAction(namespace string) *v1alpha1.ToolAction {
	return &v1alpha1.ToolAction{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "order-1"},
		Spec: v1alpha1.ToolActionSpec{ToolRef: v1alpha1.ToolReference{Kind: v1alpha1.KindClusterTool, Name: "platform-charge"},
			Parameters: map[string]apiextensionsv1.JSON{"amount": {Raw: []byte("100")}, "memo": {Raw: []byte(`"x"`)}}},
	}
}
