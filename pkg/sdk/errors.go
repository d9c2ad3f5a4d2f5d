package sdk

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// immutableSpecMessage starts the message of the CRD's CEL rule that refuses
// a different spec under an existing name (api/v1alpha1, ToolAction.Spec).
const immutableSpecMessage = "spec is immutable: this idempotency key (metadata.name) already records a different request"

var (
	// ErrDuplicateConflict matches (errors.Is) every *DuplicateConflictError.
	ErrDuplicateConflict = errors.New("the idempotency key already records a different request")

	// ErrInvalidRequest matches (errors.Is) a Request that Invoke refuses
	// before sending anything: nothing was recorded, and sending it again
	// unchanged cannot succeed.
	ErrInvalidRequest = errors.New("invalid request")

	// ErrDeleted means the ToolAction was deleted while Invoke waited for
	// its outcome. The deletion does not say whether the effect happened.
	ErrDeleted = errors.New("the ToolAction was deleted before it settled")
)

// DuplicateConflictError is returned when the key already records a
// different request: other parameters, tool, digest, provenance or
// compensation target. The API server refused the request and nothing was
// written or executed; or the key's record was deleted and its tombstone
// records a different request, and the new ToolAction failed with
// DuplicateConflict without being executed. It is never a reason to retry under a new key: either
// the caller derived the key from something that is not the intent's
// identity, or it is sending a different request for an intent that was
// already recorded.
type DuplicateConflictError struct {
	// Namespace and Key name the existing ToolAction.
	Namespace string
	Key       string
	// Err is the API server's answer: 422 Invalid from the spec's
	// immutability rule or, when another field manager recorded the field
	// that differs, 409 Conflict from server-side apply; or, for a
	// tombstone, the Failed action's message, naming the tombstone's digest.
	Err error
}

func (e *DuplicateConflictError) Error() string {
	return fmt.Sprintf("toolaction %s/%s: %v; derive a new key only for a new intent: %v", e.Namespace, e.Key, ErrDuplicateConflict, e.Err)
}

// Unwrap makes errors.Is(err, ErrDuplicateConflict) hold and keeps the API
// server's status error reachable (apierrors.IsInvalid, IsConflict).
func (e *DuplicateConflictError) Unwrap() []error {
	return []error{ErrDuplicateConflict, e.Err}
}

// isDifferentRequest reports whether err is the API server refusing an
// apply because the key records a different spec, as opposed to another
// validation failure.
//
// The immutability rule answers 422 when the applying manager changes its own
// fields. Server-side apply checks ownership before validation, so a value
// that differs from one another manager recorded is refused first, with 409
// and a FieldManagerConflict cause; the SDK applies nothing but the spec (and
// the name), so such a conflict can only be in the spec.
func isDifferentRequest(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	s := status.Status()
	var causes []metav1.StatusCause
	if s.Details != nil {
		causes = s.Details.Causes
	}
	switch {
	case apierrors.IsInvalid(err):
		if strings.Contains(s.Message, immutableSpecMessage) {
			return true
		}
		return slices.ContainsFunc(causes, func(c metav1.StatusCause) bool {
			return strings.Contains(c.Message, immutableSpecMessage)
		})
	case apierrors.IsConflict(err):
		return slices.ContainsFunc(causes, func(c metav1.StatusCause) bool {
			return c.Type == metav1.CauseTypeFieldManagerConflict && !isTraceparentField(c.Field)
		})
	}
	return false
}

// isTraceparentConflict reports an apply refused only because another
// field manager recorded another invocation's traceparent: the request is
// the same, and the invocation joins the record without its own.
func isTraceparentConflict(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || !apierrors.IsConflict(err) || status.Status().Details == nil {
		return false
	}
	causes := status.Status().Details.Causes
	return len(causes) > 0 && !slices.ContainsFunc(causes, func(c metav1.StatusCause) bool {
		return c.Type != metav1.CauseTypeFieldManagerConflict || !isTraceparentField(c.Field)
	})
}

// isTraceparentField reports the field path of the traceparent annotation
// as the API server names it in a conflict.
func isTraceparentField(field string) bool {
	return field == ".metadata.annotations."+v1alpha1.TraceparentAnnotation
}
