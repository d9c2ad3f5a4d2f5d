package mcpgateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/sdk"
)

// The A2A endpoint (Agent2Agent protocol 1.0, JSON-RPC over HTTP): each
// published tool is a skill, a message invokes one, and the message's
// messageId is its idempotency key, as UCP's A2A binding has business
// agents deduplicate platform retries. The task is the action: its id is
// the action's name, so a retried message returns the same task.
const (
	// A2APath is the JSON-RPC endpoint.
	A2APath = "/a2a"
	// AgentCardPath is where A2A clients find the agent card.
	AgentCardPath = "/.well-known/agent-card.json"

	a2aVersion       = "1.0"
	a2aVersionHeader = "A2A-Version"
	a2aErrorDomain   = "toolledger.dev"
)

// A2A's JSON-RPC error codes.
const (
	a2aTaskNotFound           = -32001
	a2aVersionNotSupported    = -32009
	a2aErrorInfoType          = "type.googleapis.com/google.rpc.ErrorInfo"
	a2aReasonConflict         = "IDEMPOTENCY_CONFLICT"
	a2aReasonInvalid          = "INVALID_ARGUMENTS"
	a2aReasonUnknownSkill     = "UNKNOWN_SKILL"
	a2aReasonForbidden        = "FORBIDDEN"
	a2aReasonUnavailable      = "LEDGER_UNAVAILABLE"
	a2aReasonInvalidKey       = "INVALID_MESSAGE_ID"
	a2aArtifactResult         = "result"
	a2aStateSubmitted         = "TASK_STATE_SUBMITTED"
	a2aStateWorking           = "TASK_STATE_WORKING"
	a2aStateCompleted         = "TASK_STATE_COMPLETED"
	a2aStateFailed            = "TASK_STATE_FAILED"
	a2aStateRejected          = "TASK_STATE_REJECTED"
	a2aMediaTypeJSON          = "application/json"
	a2aMaxRequest             = maxFrontBody + 64<<10
	a2aCardCacheSeconds       = 60
	a2aProtocolBindingJSONRPC = "JSONRPC"
)

type a2aRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

type a2aResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *a2aError       `json:"error,omitempty"`
}

type a2aError struct {
	Code    int64  `json:"code"`
	Message string `json:"message"`
	Data    []any  `json:"data,omitempty"`
}

// errorInfo is google.rpc.ErrorInfo, the detail A2A errors carry.
type errorInfo struct {
	Type     string            `json:"@type"`
	Reason   string            `json:"reason"`
	Domain   string            `json:"domain"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

func rpcError(code int64, reason, message string) *a2aError {
	e := &a2aError{Code: code, Message: message}
	if reason != "" {
		e.Data = []any{errorInfo{Type: a2aErrorInfoType, Reason: reason, Domain: a2aErrorDomain}}
	}
	return e
}

type a2aPart struct {
	Text      string          `json:"text,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
	MediaType string          `json:"mediaType,omitempty"`
}

type a2aMessage struct {
	MessageID string         `json:"messageId"`
	ContextID string         `json:"contextId,omitempty"`
	TaskID    string         `json:"taskId,omitempty"`
	Role      string         `json:"role"`
	Parts     []a2aPart      `json:"parts"`
	Metadata  map[string]any `json:"metadata,omitempty"`
}

type a2aTask struct {
	ID        string         `json:"id"`
	ContextID string         `json:"contextId"`
	Status    a2aTaskStatus  `json:"status"`
	Artifacts []a2aArtifact  `json:"artifacts,omitempty"`
	Metadata  map[string]any `json:"metadata,omitempty"`
}

type a2aTaskStatus struct {
	State   string      `json:"state"`
	Message *a2aMessage `json:"message,omitempty"`
}

type a2aArtifact struct {
	ArtifactID string    `json:"artifactId"`
	Name       string    `json:"name,omitempty"`
	Parts      []a2aPart `json:"parts"`
}

// a2aInvocation is the one data part a message carries: the skill (a
// tool's name) and its arguments.
type a2aInvocation struct {
	Skill     string          `json:"skill"`
	Arguments json.RawMessage `json:"arguments"`
}

// baseOf is base, else (a local-only gateway) the Host the request names.
func baseOf(base string, r *http.Request) string {
	if base != "" {
		return base
	}
	return "http://" + r.Host
}

// agentCard is the card of the A2A endpoint at base (scheme://host). The
// public card names no skills: like tools/list, the catalog is for callers
// who may invoke it, who read it from GetExtendedAgentCard.
func (g *Gateway) agentCard(base string, skills bool) map[string]any {
	card := map[string]any{
		"name":        "toolledger " + g.opts.Namespace,
		"description": "The tools of namespace " + g.opts.Namespace + ", each recorded in a ledger and carried out at most once per message: a message sent again with the same messageId returns the same task.",
		"supportedInterfaces": []map[string]string{
			{"url": base + A2APath, "protocolBinding": a2aProtocolBindingJSONRPC, "protocolVersion": a2aVersion},
		},
		"version":            g.opts.Version,
		"capabilities":       map[string]any{"streaming": false, "pushNotifications": false, "extendedAgentCard": true},
		"defaultInputModes":  []string{a2aMediaTypeJSON},
		"defaultOutputModes": []string{a2aMediaTypeJSON},
		"securitySchemes": map[string]any{
			"bearer": map[string]any{"httpAuthSecurityScheme": map[string]string{"scheme": "Bearer", "description": "A token of the gateway's audience, as for MCP."}},
		},
		"securityRequirements": []map[string]any{{"schemes": map[string]any{"bearer": map[string]any{"list": []string{}}}}},
		"skills":               []map[string]any{},
	}
	if skills {
		var list []map[string]any
		for _, name := range g.publisher.names() {
			e, ok := g.publisher.lookup(name)
			if !ok {
				continue
			}
			list = append(list, map[string]any{
				"id": name, "name": e.tool.Title, "description": e.tool.Description + "\n\nSend one data part {\"skill\": \"" + name + "\", \"arguments\": {…}} whose arguments match the tool's input schema.",
				"tags": []string{string(e.spec.IdempotencyClass)}, "inputModes": []string{a2aMediaTypeJSON}, "outputModes": []string{a2aMediaTypeJSON},
			})
		}
		card["skills"] = list
	}
	return card
}

// agentCardHandler serves the public agent card.
func (g *Gateway) agentCardHandler(base string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", a2aMediaTypeJSON)
		w.Header().Set("Cache-Control", fmt.Sprintf("max-age=%d", a2aCardCacheSeconds))
		_ = json.NewEncoder(w).Encode(g.agentCard(baseOf(base, r), false))
	})
}

// a2a serves the JSON-RPC endpoint: SendMessage, GetTask and
// GetExtendedAgentCard.
func (g *Gateway) a2a(base string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "A2A's JSON-RPC binding takes POST", http.StatusMethodNotAllowed)
			return
		}
		reply := func(id json.RawMessage, result any, e *a2aError) {
			w.Header().Set("Content-Type", a2aMediaTypeJSON)
			_ = json.NewEncoder(w).Encode(a2aResponse{JSONRPC: "2.0", ID: id, Result: result, Error: e})
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, a2aMaxRequest+1))
		if err != nil || len(body) > a2aMaxRequest {
			reply(nil, nil, rpcError(jsonrpc.CodeInvalidRequest, "", fmt.Sprintf("the request cannot be read, or is larger than %d bytes", a2aMaxRequest)))
			return
		}
		var req a2aRequest
		if err := json.Unmarshal(body, &req); err != nil {
			reply(nil, nil, rpcError(jsonrpc.CodeParseError, "", "the request is not JSON: "+err.Error()))
			return
		}
		if err := uniqueMembers(body); err != nil {
			reply(req.ID, nil, rpcError(jsonrpc.CodeInvalidParams, a2aReasonInvalid, err.Error()+"; nothing was recorded"))
			return
		}
		if req.JSONRPC != "2.0" || req.Method == "" {
			reply(req.ID, nil, rpcError(jsonrpc.CodeInvalidRequest, "", `the request is not JSON-RPC 2.0 ("jsonrpc":"2.0" and a method)`))
			return
		}
		if v := r.Header.Get(a2aVersionHeader); v != a2aVersion {
			reply(req.ID, nil, rpcError(a2aVersionNotSupported, "", fmt.Sprintf("A2A version %q is not supported; send %s: %s", v, a2aVersionHeader, a2aVersion)))
			return
		}
		caller, err := g.callerOfToken(auth.TokenInfoFromContext(r.Context()))
		if err != nil {
			reply(req.ID, nil, rpcError(jsonrpc.CodeInvalidRequest, a2aReasonForbidden, err.Error()))
			return
		}
		switch req.Method {
		case "SendMessage":
			result, e := g.sendMessage(r.Context(), caller, req.Params)
			reply(req.ID, result, e)
		case "GetTask":
			result, e := g.getTask(r.Context(), caller, req.Params)
			reply(req.ID, result, e)
		case "GetExtendedAgentCard":
			// The catalog, like tools/list, only for a caller who may invoke it.
			allowed, err := g.access.mayInvoke(r.Context(), caller)
			switch {
			case err != nil:
				reply(req.ID, nil, rpcError(jsonrpc.CodeInternalError, a2aReasonUnavailable, "cannot ask the API server whether you may invoke: "+err.Error()))
			case !allowed:
				reply(req.ID, nil, rpcError(jsonrpc.CodeInvalidRequest, a2aReasonForbidden, fmt.Sprintf("%s may not invoke tools in namespace %q (creating ToolActions is forbidden), so no skills are listed; ask the namespace's admin for the toolledger agent role", caller.name, g.opts.Namespace)))
			default:
				reply(req.ID, g.agentCard(baseOf(base, r), true), nil)
			}
		default:
			reply(req.ID, nil, rpcError(jsonrpc.CodeMethodNotFound, "", fmt.Sprintf("method %q is not served: SendMessage, GetTask and GetExtendedAgentCard are", req.Method)))
		}
	})
}

// sendMessage records the message's invocation under its messageId and
// answers with the task: the action as far as it got within the wait.
func (g *Gateway) sendMessage(ctx context.Context, caller *caller, params json.RawMessage) (any, *a2aError) {
	var p struct {
		Message *a2aMessage `json:"message"`
	}
	if err := json.Unmarshal(params, &p); err != nil || p.Message == nil {
		return nil, rpcError(jsonrpc.CodeInvalidParams, a2aReasonInvalid, "params.message is required: a Message with a messageId and one data part {\"skill\", \"arguments\"}")
	}
	m := p.Message
	if err := sdk.ValidClientKey(m.MessageID); err != nil {
		return nil, rpcError(jsonrpc.CodeInvalidParams, a2aReasonInvalidKey, "message.messageId is the idempotency key: "+err.Error())
	}
	if m.TaskID != "" {
		return nil, rpcError(a2aTaskNotFound, "", "every message starts a task of its own: send it without a taskId (a retried message returns its task)")
	}
	var invocation *a2aInvocation
	for _, part := range m.Parts {
		if len(part.Data) == 0 {
			continue
		}
		if invocation != nil {
			return nil, rpcError(jsonrpc.CodeInvalidParams, a2aReasonInvalid, "the message has more than one data part; send one {\"skill\", \"arguments\"}")
		}
		invocation = &a2aInvocation{}
		if err := json.Unmarshal(part.Data, invocation); err != nil || invocation.Skill == "" {
			return nil, rpcError(jsonrpc.CodeInvalidParams, a2aReasonInvalid, "the data part must be an object {\"skill\": <tool>, \"arguments\": {…}}")
		}
	}
	if invocation == nil {
		return nil, rpcError(jsonrpc.CodeInvalidParams, a2aReasonInvalid, "the message has no data part {\"skill\": <tool>, \"arguments\": {…}}: text alone names no tool")
	}
	e, ok := g.publisher.lookup(invocation.Skill)
	if !ok {
		return nil, rpcError(jsonrpc.CodeInvalidParams, a2aReasonUnknownSkill, fmt.Sprintf("no skill %q is served in namespace %q; GetExtendedAgentCard lists them", invocation.Skill, g.opts.Namespace))
	}
	arguments, err := objectArguments(invocation.Arguments)
	var parameters map[string]any
	if err == nil {
		parameters, err = e.parameters(arguments, "arguments")
	}
	if err != nil {
		return nil, rpcError(jsonrpc.CodeInvalidParams, a2aReasonInvalid, err.Error()+"; nothing was recorded")
	}
	name, err := g.recordedName(ctx, caller, sdk.ClientKey(caller.name, e.ref.Name, m.MessageID), sdk.ClusterToolClientKey(caller.name, e.ref.Name, m.MessageID))
	a := nameRefused(err)
	if err == nil {
		request := sdk.Request{Namespace: g.opts.Namespace, Tool: e.ref.Name, ToolKind: e.ref.Kind, Parameters: parameters, Key: name, ClientKey: m.MessageID}
		a = g.record(ctx, caller, request, nil)
	}
	switch a.verdict {
	case verdictConflict:
		return nil, rpcError(jsonrpc.CodeInvalidParams, a2aReasonConflict, fmt.Sprintf("messageId %q has already been sent with a different request (task %s); nothing was executed", m.MessageID, name))
	case verdictForbidden:
		return nil, rpcError(jsonrpc.CodeInvalidRequest, a2aReasonForbidden, g.forbidden(caller, a.err))
	case verdictInvalid:
		return nil, rpcError(jsonrpc.CodeInvalidParams, a2aReasonInvalid, apiMessage(a.err))
	case verdictCancelled, verdictUnavailable:
		return nil, rpcError(jsonrpc.CodeInternalError, a2aReasonUnavailable, unavailable(a.err))
	}
	return map[string]any{"task": taskOf(a.outcome, m.MessageID)}, nil
}

// getTask reads a task (an action) as the caller.
func (g *Gateway) getTask(ctx context.Context, caller *caller, params json.RawMessage) (any, *a2aError) {
	var p struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(params, &p); err != nil || p.ID == "" {
		return nil, rpcError(jsonrpc.CodeInvalidParams, a2aReasonInvalid, "params.id names the task")
	}
	if len(validation.IsDNS1123Subdomain(p.ID)) > 0 {
		return nil, rpcError(a2aTaskNotFound, "", fmt.Sprintf("no task %q in namespace %q: a task id is an action's name", p.ID, g.opts.Namespace))
	}
	var action v1alpha1.ToolAction
	err := g.reader.Get(caller.acting(ctx), client.ObjectKey{Namespace: g.opts.Namespace, Name: p.ID}, &action)
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || (err == nil && action.Spec.ClientKey == ""):
		// A task no message started is no task of this endpoint.
		return nil, rpcError(a2aTaskNotFound, "", fmt.Sprintf("no task %q in namespace %q that you may read", p.ID, g.opts.Namespace))
	case err != nil:
		return nil, rpcError(jsonrpc.CodeInternalError, a2aReasonUnavailable, unavailable(err))
	}
	return taskOf(sdk.OutcomeOf(&action), action.Spec.ClientKey), nil
}

// taskOf is the task of an action: its state, the stored result as an
// artifact, and the ledger's words in the metadata. The ledger keeps no
// conversation: the task's context is the task itself.
func taskOf(o *sdk.Outcome, messageID string) a2aTask {
	state, words := a2aStateWorking, ""
	switch o.Phase {
	case v1alpha1.PhaseSucceeded:
		state = a2aStateCompleted
		if o.Deduplicated {
			words = "This message was already recorded: this call caused no second effect."
		}
	case v1alpha1.PhaseFailed:
		state, words = a2aStateFailed, fmt.Sprintf("Failed: %s/%s. Final for this message.", o.ErrorClass, o.ErrorReason)
		if o.ErrorClass == v1alpha1.ErrorClassInvalidInput || o.ErrorClass == v1alpha1.ErrorClassDenied {
			state = a2aStateRejected
		}
	case v1alpha1.PhasePending:
		state = a2aStateSubmitted
	case v1alpha1.PhaseAccepted, v1alpha1.PhaseExecuting, v1alpha1.PhaseRetryScheduled:
		words = fmt.Sprintf("Still in flight (phase %s). Do not send a new message for it; GetTask, or send the same message again.", o.Phase)
	case v1alpha1.PhaseUnknown:
		words = "The outcome is not known yet: the ledger is looking the effect up. Do not send a new message for it; GetTask, or send the same message again."
	case v1alpha1.PhaseEscalated:
		words = "Escalated to a human: nobody can yet prove whether the effect happened. Do not send a new message for it."
	case v1alpha1.PhaseAwaitingApproval:
		words = "Awaiting a human's approval: it runs once approved."
	}
	t := a2aTask{ID: o.Key, ContextID: o.Key, Status: a2aTaskStatus{State: state}, Metadata: map[string]any{
		metaPrefix + "phase":        string(o.Phase),
		metaPrefix + "deduplicated": o.Deduplicated,
		metaPrefix + "messageId":    messageID,
	}}
	if words != "" {
		t.Status.Message = &a2aMessage{MessageID: o.Key + "-status", Role: "ROLE_AGENT", Parts: []a2aPart{{Text: words}}}
	}
	if o.ErrorClass != "" {
		t.Metadata[metaPrefix+"errorClass"] = string(o.ErrorClass)
		t.Metadata[metaPrefix+"errorReason"] = o.ErrorReason
	}
	if o.ExternalRef != "" {
		t.Metadata[metaPrefix+"externalRef"] = o.ExternalRef
	}
	if kept := rfc3339(o.KeptUntil); kept != "" {
		t.Metadata[metaPrefix+"keptUntil"] = kept
	}
	if kept := rfc3339(o.DownstreamKeptUntil); kept != "" {
		t.Metadata[metaPrefix+"downstreamKeptUntil"] = kept
	}
	if len(o.Result) > 0 {
		t.Artifacts = []a2aArtifact{{ArtifactID: a2aArtifactResult, Name: a2aArtifactResult, Parts: []a2aPart{{Data: o.Result, MediaType: a2aMediaTypeJSON}}}}
	}
	return t
}
