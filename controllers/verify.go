package controllers

import (
	"encoding/json"
	"fmt"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/toolcontract"
	"github.com/toolledger/toolledger/pkg/digest"
)

// toolContract is the tool's compiled parameters schema, or the
// *invalidError that refuses every action of a tool whose schema cannot be
// used. It needs no parameters, so a refusal never reads them.
func toolContract(tool *v1alpha1.Tool) (*toolcontract.Schema, error) {
	schema, err := toolcontract.CompileSchema(tool.Spec.ParametersSchema)
	if err != nil {
		return nil, &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonInvalidToolContract,
			message: fmt.Sprintf("tool %q: %v", tool.Name, err)}
	}
	return schema, nil
}

// verifyRequest checks the parameters against the tool's compiled schema,
// computes the request digest and checks it against the client's and, on a
// retry, against the one recorded at the first attempt. It returns the
// digest and the parameters to send.
func verifyRequest(action *v1alpha1.ToolAction, tool *v1alpha1.Tool, schema *toolcontract.Schema) (string, json.RawMessage, error) {
	parameters, err := toolcontract.Parameters(action.Spec.Parameters)
	if err != nil {
		return "", nil, &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonInvalidParameters, message: err.Error()}
	}
	if len(parameters) > v1alpha1.MaxParametersBytes {
		return "", nil, &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonInvalidParameters,
			message: fmt.Sprintf("spec.parameters is %d bytes encoded, over the limit of %d bytes (1 MiB)", len(parameters), v1alpha1.MaxParametersBytes)}
	}
	if err := schema.Validate(parameters); err != nil {
		return "", nil, &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonInvalidParameters, message: err.Error()}
	}
	consequential, err := toolcontract.Consequential(parameters, tool.Spec.ConsequentialFields)
	if err != nil {
		return "", nil, &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonInvalidParameters, message: err.Error()}
	}
	requestDigest, err := digest.Compute(digest.Request{
		Tenant:     action.Namespace,
		Tool:       tool.Name,
		Operation:  tool.Spec.Operation,
		Version:    tool.Spec.Version,
		Parameters: consequential,
	})
	if err != nil {
		return "", nil, &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonInvalidParameters,
			message: fmt.Sprintf("spec.parameters: %v", err)}
	}
	if want := action.Spec.RequestDigest; want != "" && want != requestDigest {
		return "", nil, &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonRequestDigestMismatch,
			message: fmt.Sprintf("spec.requestDigest %s does not match the request's digest %s (tenant %q, tool %q, operation %q, version %q)",
				want, requestDigest, action.Namespace, tool.Name, tool.Spec.Operation, tool.Spec.Version)}
	}
	if recorded := action.Status.RequestDigest; recorded != "" && recorded != requestDigest {
		return "", nil, &invalidError{class: v1alpha1.ErrorClassDuplicateConflict, reason: ReasonRequestChanged,
			message: fmt.Sprintf("the request's digest changed from %s to %s since its first attempt (the tool's operation or version changed); it is not retried as a different request",
				recorded, requestDigest)}
	}
	return requestDigest, parameters, nil
}
