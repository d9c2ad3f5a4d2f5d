package controllers

import (
	"time"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/adapter"
	"github.com/toolledger/toolledger/pkg/digest"
)

// Defaults for Tools stored before the API server applied the CRD defaults.
const (
	defaultMaxAttempts     = 5
	defaultInitialBackoff  = time.Second
	defaultMaxBackoff      = 5 * time.Minute
	defaultToolTimeout     = 10 * time.Second
	defaultUnknownDeadline = 10 * time.Minute
)

func unknownDeadline(tool *v1alpha1.Tool) time.Duration {
	if d := tool.Spec.UnknownOutcomeDeadline; d != nil && d.Duration > 0 {
		return d.Duration
	}
	return defaultUnknownDeadline
}

// attemptTimeout bounds one dispatch, as the tool's adapter says.
func attemptTimeout(caps adapter.Capabilities) time.Duration {
	if caps.AttemptTimeout > 0 {
		return caps.AttemptTimeout
	}
	return defaultToolTimeout
}

func maxAttempts(tool *v1alpha1.Tool) int32 {
	if n := tool.Spec.Retry.MaxAttempts; n > 0 {
		return n
	}
	return defaultMaxAttempts
}

// backoff is the delay before the attempt after attempt number `attempts`:
// initialBackoff doubled per earlier retry, with up to half of it taken off
// at random so that actions failing together do not retry together. A
// downstream's Retry-After is honored as a lower bound. maxBackoff caps both.
func backoff(tool *v1alpha1.Tool, attempts int32, retryAfter time.Duration, random func() float64) time.Duration {
	initial, ceiling := defaultInitialBackoff, defaultMaxBackoff
	if b := tool.Spec.Retry.InitialBackoff; b != nil && b.Duration > 0 {
		initial = b.Duration
	}
	if b := tool.Spec.Retry.MaxBackoff; b != nil && b.Duration > 0 {
		ceiling = b.Duration
	}
	delay := ceiling
	if shift := attempts - 1; shift < 32 && initial<<shift > 0 && initial<<shift < ceiling {
		delay = initial << shift
	}
	delay -= time.Duration(random() * float64(delay) / 2)
	delay = max(delay, retryAfter)
	return min(delay, ceiling)
}

// targetDigest covers where and how a tool sends its actions: the member of
// its adapter union (an HTTP tool's URL, headers, lookup and body; a
// kubernetesApply tool's template and ServiceAccount), so that an approval
// is bound to the target the approver saw.
func targetDigest(spec *v1alpha1.ToolSpec) (string, error) {
	return digest.Of(struct {
		HTTP            *v1alpha1.HTTPAdapter            `json:"http,omitempty"`
		KubernetesApply *v1alpha1.KubernetesApplyAdapter `json:"kubernetesApply,omitempty"`
	}{spec.HTTP, spec.KubernetesApply})
}
