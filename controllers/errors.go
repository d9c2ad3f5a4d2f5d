package controllers

import (
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// invalidError: the action can never be dispatched as written; it fails
// with class before anything is sent.
type invalidError struct {
	class   v1alpha1.ErrorClass
	reason  string
	message string
}

func (e *invalidError) Error() string { return e.message }

func ignoreConflict(err error, format string, args ...any) error {
	if err == nil || apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		// A newer version of the record exists; its watch event brings us back.
		return nil
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}

func isInvalid(err error) bool {
	var invalid *invalidError
	return errors.As(err, &invalid)
}
