package console

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// toolsAPI serves one ClusterTool and the namespace shop, labelled.
func toolsAPI(t *testing.T, clusterTool v1alpha1.ClusterTool, shopLabels map[string]string) *Ledger {
	t.Helper()
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var answer any
		switch r.URL.Path {
		case "/apis/toolledger.dev/v1alpha1/clustertools/" + clusterTool.Name:
			answer = clusterTool
		case "/api/v1/namespaces/shop":
			answer = corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
				ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: shopLabels}}
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
	platform := v1alpha1.ClusterTool{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.KindClusterTool},
		ObjectMeta: metav1.ObjectMeta{Name: "platform-charge"},
		Spec: v1alpha1.ClusterToolSpec{
			ToolSpec:          v1alpha1.ToolSpec{ConsequentialFields: []string{"/amount"}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "platform"}},
		},
	}
	action := &v1alpha1.ToolAction{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "order-1"},
		Spec: v1alpha1.ToolActionSpec{ToolRef: v1alpha1.ToolReference{Kind: v1alpha1.KindClusterTool, Name: "platform-charge"},
			Parameters: map[string]apiextensionsv1.JSON{"amount": {Raw: []byte("100")}, "memo": {Raw: []byte(`"x"`)}}},
	}
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
			params, err := toolsAPI(t, platform, tt.shopLabels).Parameters(t.Context(), action)
			if err != nil {
				t.Fatal(err)
			}
			var inDigest []bool
			for _, p := range params {
				inDigest = append(inDigest, p.InDigest)
			}
			if diff := cmp.Diff(tt.inDigest, inDigest); diff != "" {
				t.Errorf("IN-DIGEST of /amount, /memo (-want +got):\n%s", diff)
			}
		})
	}
}
