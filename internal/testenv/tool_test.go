package testenv

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

func TestNewTool(t *testing.T) {
	const url = "http://127.0.0.1:8089/charges"
	second := &metav1.Duration{Duration: time.Second}
	for _, tc := range []struct {
		name string
		opts []ToolOption
		want v1alpha1.ToolSpec
	}{{
		name: "without options: the contract and the request, all else defaulted by the API server",
		want: v1alpha1.ToolSpec{
			Operation: "payments.charge", Version: "v1", IdempotencyClass: v1alpha1.KeyProtected,
			HTTP: &v1alpha1.HTTPAdapter{URL: url, Response: v1alpha1.HTTPResponse{ExternalIDPointer: "/id"}},
		},
	}, {
		name: "every option",
		opts: []ToolOption{
			WithOperation("payments.refund"), WithClass(v1alpha1.Compensatable), WithTimeout(time.Second),
			WithKeyLookup(), WithResultPointers("/status"), WithAuthSecret("payments-api", "token"),
			WithMaxAttempts(2), WithBackoff(time.Second, time.Minute), WithUnknownOutcomeDeadline(time.Second),
			WithParametersSchema(`{"type": "object"}`), WithConsequentialFields("/amount"),
			WithApprovalRequired(), WithKeyRetention(time.Second),
		},
		want: v1alpha1.ToolSpec{
			Operation: "payments.refund", Version: "v1", IdempotencyClass: v1alpha1.Compensatable,
			HTTP: &v1alpha1.HTTPAdapter{
				URL:        url,
				AuthHeader: &v1alpha1.SecretHeader{SecretKeyRef: v1alpha1.SecretKeySelector{Name: "payments-api", Key: "token"}},
				Timeout:    second,
				Lookup:     &v1alpha1.HTTPLookup{URL: url + "/by-key/{key}", NotFoundMeansAbsent: true},
				Response:   v1alpha1.HTTPResponse{ExternalIDPointer: "/id", ResultPointers: []string{"/status"}},
			},
			Retry: v1alpha1.RetryPolicy{
				MaxAttempts: 2, InitialBackoff: second, MaxBackoff: &metav1.Duration{Duration: time.Minute},
			},
			UnknownOutcomeDeadline: second,
			ParametersSchema:       &apiextensionsv1.JSON{Raw: []byte(`{"type": "object"}`)},
			ApprovalRequired:       true,
			KeyRetention:           second,
			ConsequentialFields:    []string{"/amount"},
		},
	}, {
		name: "a later option wins",
		opts: []ToolOption{WithKeyLookup(), WithTimeout(time.Minute), WithoutLookup(), WithTimeout(time.Second)},
		want: v1alpha1.ToolSpec{
			Operation: "payments.charge", Version: "v1", IdempotencyClass: v1alpha1.KeyProtected,
			HTTP: &v1alpha1.HTTPAdapter{URL: url, Timeout: second, Response: v1alpha1.HTTPResponse{ExternalIDPointer: "/id"}},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			tool := NewTool("shop", "charge", url, tc.opts...)
			if tool.Namespace != "shop" || tool.Name != "charge" {
				t.Errorf("tool is %s/%s, want shop/charge", tool.Namespace, tool.Name)
			}
			if diff := cmp.Diff(tc.want, tool.Spec); diff != "" {
				t.Errorf("spec (-want +got):\n%s", diff)
			}
		})
	}
}
