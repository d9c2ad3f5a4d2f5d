package controllers

import (
	"time"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// Defaults for Tools stored before the API server applied the CRD defaults.
const (
	defaultMaxAttempts     = 5
	defaultInitialBackoff  = time.Second
	defaultMaxBackoff      = 5 * time.Minute
	defaultToolTimeout     = 10 * time.Second
	defaultUnknownDeadline = 10 * time.Minute
)

// unknownPolicy is what the controller may do about an unknown outcome.
type unknownPolicy int

const (
	// lookUp asks the downstream by key; absent means retry under the same key.
	lookUp unknownPolicy = iota
	// redispatch re-sends under the same key: the downstream deduplicates
	// (KeyProtected) or a repeat is harmless (ReadOnly, NaturallyIdempotent).
	redispatch
	// escalate hands the action to a human at once.
	escalate
)

// policyForUnknown follows the tool's idempotency class. NonRepeatable tools
// escalate at once, whatever else they offer; others prefer a lookup, which
// proves the outcome, to a re-send, which only repeats it safely.
func policyForUnknown(tool *v1alpha1.Tool) unknownPolicy {
	class := tool.Spec.IdempotencyClass
	switch {
	case class == v1alpha1.NonRepeatable:
		return escalate
	case tool.Spec.HTTP.Lookup != nil:
		return lookUp
	case class == v1alpha1.KeyProtected || class == v1alpha1.ReadOnly || class == v1alpha1.NaturallyIdempotent:
		return redispatch
	default:
		return escalate
	}
}

func unknownDeadline(tool *v1alpha1.Tool) time.Duration {
	if d := tool.Spec.UnknownOutcomeDeadline; d != nil && d.Duration > 0 {
		return d.Duration
	}
	return defaultUnknownDeadline
}

func toolTimeout(tool *v1alpha1.Tool) time.Duration {
	if t := tool.Spec.HTTP.Timeout; t != nil && t.Duration > 0 {
		return t.Duration
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
