package console

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

func TestMarkParametersListsEveryLeafAndWhatEntersTheDigest(t *testing.T) {
	const params = `{"customer":{"id":"c-1","tags":["a/b","x~y"]},"amount":1e2,"note":"<b>hi</b>","empty":{},"a/b":{"c~d":true}}`
	all := func(inDigest ...bool) []Parameter {
		rows := []Parameter{
			{Path: "/a~1b/c~0d", Value: json.RawMessage(`true`)},
			{Path: "/amount", Value: json.RawMessage(`1e2`)},
			{Path: "/customer/id", Value: json.RawMessage(`"c-1"`)},
			{Path: "/customer/tags/0", Value: json.RawMessage(`"a/b"`)},
			{Path: "/customer/tags/1", Value: json.RawMessage(`"x~y"`)},
			{Path: "/empty", Value: json.RawMessage(`{}`)},
			{Path: "/note", Value: json.RawMessage(`"<b>hi</b>"`)},
		}
		for i := range rows {
			rows[i].InDigest = inDigest[i]
		}
		return rows
	}
	tests := []struct {
		name   string
		fields []string
		want   []Parameter
	}{
		{name: "no consequentialFields: all", want: all(true, true, true, true, true, true, true)},
		{name: "a field and an object", fields: []string{"/amount", "/customer"}, want: all(false, true, true, true, true, false, false)},
		{name: "a field within an object, an escaped name, an empty object", fields: []string{"/customer/tags/1", "/a~1b", "/empty"},
			want: all(true, false, false, false, true, true, false)},
		{name: "a field the parameters do not have", fields: []string{"/payee"}, want: all(false, false, false, false, false, false, false)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := MarkParameters(json.RawMessage(params), tc.fields)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parameters (-want +got):\n%s", diff)
			}
		})
	}
	if got, err := MarkParameters(json.RawMessage(`{}`), nil); err != nil || len(got) != 0 {
		t.Errorf("MarkParameters({}) = %v, %v; want none", got, err)
	}
	if _, err := MarkParameters(json.RawMessage(`{"a":`), nil); err == nil {
		t.Error("MarkParameters of broken JSON succeeded")
	}
}

// TestStatusAndApprovalsShowEveryParameter: a parameter that does not enter
// the digest is sent all the same, so the approver sees it, marked.
func TestStatusAndApprovalsShowEveryParameter(t *testing.T) {
	params, err := MarkParameters(json.RawMessage(`{"amount":100,"currency":"EUR","customer":"cus_9","memo":"line\u001b[31m"}`), []string{"/amount", "/currency"})
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
	approvals := Approvals{Items: []ApprovalItem{{Namespace: "shop", Name: "refund-1", Tool: "refund", RequestDigest: "sha256:abc", Parameters: params}}}
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
