package mcpgateway

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/sdk"
)

// The commerce protocols' MCP bindings carry a call's metadata, the
// caller's idempotency key among it, in the arguments' top-level "meta"
// member, never a parameter: ACP (the Agentic Commerce Protocol) as
// meta.idempotency_key, UCP (the Universal Commerce Protocol) as
// meta["idempotency-key"].
const (
	envelopeMember = "meta"
	acpKeyMember   = "idempotency_key"
	ucpKeyMember   = "idempotency-key"
	// ucpAgentMember is required in every UCP call's meta: a call that
	// carries it but no key is answered in UCP's shapes.
	ucpAgentMember = "ucp-agent"
)

// binding is the convention a call's key came in, which decides the shape
// of the idempotency errors it is answered with.
type binding string

const (
	// bindingLedger is _meta's toolledger.dev/key, or no key at all: every
	// answer is a tool result holding the ledger's Outcome.
	bindingLedger binding = ""
	bindingACP    binding = "ACP"
	bindingUCP    binding = "UCP"
)

// The error codes the bindings answer idempotency failures with, as ACP's
// REST rules name them (UCP names none of its own).
const (
	codeKeyRequired = "idempotency_key_required"
	codeInvalidKey  = "invalid_idempotency_key"
	codeConflict    = "idempotency_conflict"
	codeInFlight    = "idempotency_in_flight"
	codeUnavailable = "service_unavailable"
	acpInvalid      = "invalid_request"
	acpUnavailable  = "service_unavailable"
	acpKeyPath      = "$.meta.idempotency_key"
	rpcBindingError = -32000
)

// callKey is the key a call carries of its caller's own, and the binding
// it came in.
type callKey struct {
	binding binding
	// key is as the caller sent it; empty when the call carries none.
	key string
	// where names the carrier, for messages.
	where string
}

// envelope removes the top-level meta member from the arguments and reads
// the key from it or from _meta. It refuses a meta that is not an object, a
// key that is not a string of 1 to 255 printable ASCII characters, and a
// call carrying keys in two places.
func envelope(arguments json.RawMessage, ledgerKey string) (json.RawMessage, callKey, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(arguments, &members); err != nil {
		return nil, callKey{}, fmt.Errorf("the arguments are not a JSON object: %w", err)
	}
	raw, ok := members[envelopeMember]
	if !ok {
		return arguments, callKey{key: ledgerKey, where: "_meta " + MetaKey}, nil
	}
	var meta map[string]json.RawMessage
	if err := json.Unmarshal(raw, &meta); err != nil || meta == nil {
		return nil, callKey{}, fmt.Errorf("arguments.%s must be an object (the request's metadata)", envelopeMember)
	}
	delete(members, envelopeMember)
	stripped, err := json.Marshal(members)
	if err != nil {
		return nil, callKey{}, fmt.Errorf("cannot encode the arguments: %w", err)
	}
	acp, hasACP := meta[acpKeyMember]
	ucp, hasUCP := meta[ucpKeyMember]
	_, hasUCPAgent := meta[ucpAgentMember]
	k := callKey{binding: bindingACP, where: "arguments.meta." + acpKeyMember}
	if hasUCP || (hasUCPAgent && !hasACP) {
		k = callKey{binding: bindingUCP, where: fmt.Sprintf("arguments.meta[%q]", ucpKeyMember)}
	}
	switch {
	case hasACP && hasUCP:
		return nil, k, fmt.Errorf("the call carries two keys, arguments.meta.%s and arguments.meta[%q]; send one", acpKeyMember, ucpKeyMember)
	case (hasACP || hasUCP) && ledgerKey != "":
		return nil, k, fmt.Errorf("the call carries two keys, %s and _meta %s; send one", k.where, MetaKey)
	case hasACP:
		k.key, err = keyString(acp, k.where)
	case hasUCP:
		k.key, err = keyString(ucp, k.where)
	case ledgerKey != "":
		// No commerce key: _meta's is the ledger's own, the action's name.
		return stripped, callKey{key: ledgerKey, where: "_meta " + MetaKey}, nil
	default:
		// No key at all: the binding shapes only the refusal of a Tool
		// that requires one.
		return stripped, callKey{binding: k.binding}, nil
	}
	return stripped, k, err
}

func keyString(raw json.RawMessage, where string) (string, error) {
	var key string
	if err := json.Unmarshal(raw, &key); err != nil {
		return "", fmt.Errorf("%s must be a string", where)
	}
	if err := sdk.ValidClientKey(key); err != nil {
		return "", fmt.Errorf("%s is not a valid key: %w", where, err)
	}
	return key, nil
}

// acpError is ACP's Error object: the data of a JSON-RPC error in its MCP
// binding, and the body of every refusal of the HTTP front.
type acpError struct {
	Type    string `json:"type"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Param   string `json:"param,omitempty"`
}

// ucpError is the data of a UCP JSON-RPC error: a code, the words, and
// when to try again.
type ucpError struct {
	Code       string `json:"code"`
	Content    string `json:"content"`
	RetryAfter int64  `json:"retry_after,omitempty"`
}

// refuse answers an idempotency failure in the binding's shape: ACP's and
// UCP's -32000 with their error data, or -32602 for a UCP call without the
// key its input schema requires.
func (b binding) refuse(code, message string, retryAfter time.Duration) error {
	rpc := int64(rpcBindingError)
	var data any
	switch b {
	case bindingUCP:
		if code == codeKeyRequired {
			rpc = jsonrpc.CodeInvalidParams
		}
		data = ucpError{Code: code, Content: message, RetryAfter: int64(retryAfter.Round(time.Second) / time.Second)}
	default:
		e := acpError{Type: acpInvalid, Code: code, Message: message}
		switch code {
		case codeUnavailable:
			e.Type = acpUnavailable
		case codeKeyRequired, codeInvalidKey:
			e.Param = acpKeyPath
		}
		data = e
	}
	encoded, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("cannot encode the %s error %s: %w", b, code, err)
	}
	return &jsonrpc.Error{Code: rpc, Message: message, Data: encoded}
}

// retryAfter is how soon a call may usefully ask again about an action
// still in phase: soon while it runs, later while it waits for a retry, a
// lookup or a human.
func retryAfter(phase v1alpha1.Phase) time.Duration {
	switch phase {
	case v1alpha1.PhaseRetryScheduled:
		return 5 * time.Second
	case v1alpha1.PhaseUnknown:
		return 10 * time.Second
	case v1alpha1.PhaseAwaitingApproval, v1alpha1.PhaseEscalated:
		return time.Minute
	default:
		return time.Second
	}
}
