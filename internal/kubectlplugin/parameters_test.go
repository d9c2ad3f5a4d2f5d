package kubectlplugin

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/ledgerclient"
)

// TestStatusAndApprovalsShowEveryParameter: a parameter that does not enter
// the digest is sent all the same, so the approver sees it, marked.
func TestStatusAndApprovalsShowEveryParameter(t *testing.T) {
	params, err := ledgerclient.MarkParameters(json.RawMessage(`{"amount":100,"currency":"EUR","customer":"cus_9","memo":"line\u001b[31m"}`), []string{"/amount", "/currency"})
	if err != nil {
		t.Fatal(err)
	}
	action := &v1alpha1.ToolAction{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "refund-1", CreationTimestamp: at(-time.Minute)},
		Spec:       v1alpha1.ToolActionSpec{ToolRef: v1alpha1.ToolReference{Name: "refund"}},
		Status:     v1alpha1.ToolActionStatus{Phase: v1alpha1.PhaseAwaitingApproval, RequestDigest: "sha256:abc"},
	}
	var out bytes.Buffer
	if err := writeStatus(&out, action, statusFacts{parameters: params}, now); err != nil {
		t.Fatal(err)
	}
	want := "Parameters (all are sent; IN-DIGEST says which enter the request digest, which an approval binds):\n" +
		"  PARAMETER   IN-DIGEST   VALUE\n" +
		"  /amount     yes         100\n" +
		"  /currency   yes         \"EUR\"\n" +
		"  /customer   no          \"cus_9\"\n" +
		"  /memo       no          \"line\\u001b[31m\"\n"
	if !strings.Contains(out.String(), want) {
		t.Errorf("status does not contain\n%s\nin:\n%s", want, out.String())
	}

	out.Reset()
	approvals := ledgerclient.Approvals{Items: []ledgerclient.ApprovalItem{{Namespace: "shop", Name: "refund-1", Tool: "refund", RequestDigest: "sha256:abc", Parameters: params}}}
	if err := writeApprovals(&out, approvals, false); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("approvals table has %d lines, want 2:\n%s", len(lines), out.String())
	}
	if got := strings.Fields(lines[0]); !cmp.Equal(got, []string{"NAME", "AGE", "TOOL", "REQUESTED-BY", "DIGEST", "IN-DIGEST", "NOT-IN-DIGEST"}) {
		t.Errorf("columns = %v", got)
	}
	if want := `sha256:abc   /amount=100 /currency="EUR"   /customer="cus_9" /memo="line\u001b[31m"`; !strings.HasSuffix(lines[1], want) {
		t.Errorf("row = %q\nwant suffix %q", lines[1], want)
	}

	out.Reset()
	decision := &v1alpha1.ToolApproval{ObjectMeta: metav1.ObjectMeta{Name: "refund-1-approval-x"},
		Spec: v1alpha1.ToolApprovalSpec{ActionName: "refund-1", Decision: v1alpha1.Approved, RequestDigest: "sha256:abc", Reason: "ok"}}
	writeDecision(&out, decision, action, params)
	for _, want := range []string{"  in digest:     /amount=100 /currency=\"EUR\"\n", "  not in digest: /customer=\"cus_9\" /memo=\"line\\u001b[31m\"\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("decision does not contain %q:\n%s", want, out.String())
		}
	}
}
