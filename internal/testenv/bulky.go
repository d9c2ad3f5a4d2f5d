package testenv

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// BulkyAction is a finished ToolAction as an agent's kubectl apply leaves
// it when it sends a document of size bytes as one string parameter (the
// parameters policy counts a string as one value): the parameter, and
// kubectl's last-applied-configuration annotation, which copies it. It
// failed after one attempt, as archived Failed actions are kept too.
func BulkyAction(namespace, key string, size int, completed time.Time) (*v1alpha1.ToolAction, error) {
	document, err := json.Marshal(strings.Repeat("x", size))
	if err != nil {
		return nil, err
	}
	a := &v1alpha1.ToolAction{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "ToolAction"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: key, UID: types.UID(namespace + "-" + key),
			CreationTimestamp: metav1.NewTime(completed.Add(-2 * time.Second)),
			Annotations:       map[string]string{v1alpha1.RequestedByAnnotation: "agent-" + key}},
		Spec: v1alpha1.ToolActionSpec{ToolRef: v1alpha1.ToolReference{Name: "upload"}, Parameters: map[string]apiextensionsv1.JSON{
			"document": {Raw: document}, "folder": {Raw: []byte(`"reports"`)}}},
	}
	applied, err := json.Marshal(a)
	if err != nil {
		return nil, err
	}
	a.Annotations[corev1.LastAppliedConfigAnnotation] = string(applied)
	done := metav1.NewTime(completed)
	a.Status = v1alpha1.ToolActionStatus{
		Phase: v1alpha1.PhaseFailed, Attempts: 1, RequestDigest: "sha256:" + strings.Repeat("ab", 32), CompletionTime: &done,
		Error: &v1alpha1.ActionError{Class: v1alpha1.ErrorClassInvalidInput, Reason: "DownstreamRejected", Message: fmt.Sprintf("the downstream refused a document of %d bytes", size)},
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: "DownstreamRejected", LastTransitionTime: done},
			{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionTrue, Reason: "DownstreamRejected", LastTransitionTime: done}},
	}
	return a, nil
}
