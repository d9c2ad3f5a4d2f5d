// Package sdk is the Go SDK for agents that call tools through toolledger.
// An agent turns each business intent into a Request under a stable
// idempotency key, and Client.Invoke records it as a ToolAction (the key is
// the object's name, the tenant its namespace) and waits for the outcome.
// However often an agent, a retry loop, a replayed workflow or a sub-agent
// invokes the same intent, it happens downstream once.
//
// # Keys
//
// A key must name the intent, not the attempt: derive it from identity that
// every retry and replay of the intent shares, never from model output or
// from randomness per attempt. Keys are valid Kubernetes object names
// (DNS-1123 subdomains: lowercase alphanumerics, '-' and '.', at most 253
// characters).
//
// WorkflowKey(runID, stepID, operation, version) and
// ArgumentsKey(operation, version, arguments) are encoded as
//
//	<readable>-<hash>
//
// readable: each part lowercased, every run of characters other than ASCII
// letters and digits replaced by one '-', trimmed; empty parts dropped; the
// parts joined by '-' and cut to 46 characters (the run, step, operation and
// version for WorkflowKey; the operation and version for ArgumentsKey).
// Without any readable part the key is the hash alone.
//
// hash: the first 16 hex digits of the SHA-256 over a domain string
// ("toolledger.dev/workflow-key/v1" or "toolledger.dev/arguments-key/v1")
// and the raw parts, each preceded by its length as an 8-byte big-endian
// integer, so ("a-b", "c") and ("a", "b-c"), or "Run" and "run", differ. For
// ArgumentsKey the last part is the RFC 8785 canonical JSON of the arguments
// (package digest), so member order, whitespace and number spelling do not
// change the key. Derived keys are at most 63 characters.
//
// BatchItemKey(batchKey, itemID) is batchKey, '-' and the item ID when the
// ID is already lowercase alphanumerics separated by single '-'; otherwise
// batchKey, '-', the sanitized ID (cut to fit 253 characters) and '-' and 16
// hex digits of the SHA-256 of the domain "toolledger.dev/batch-item/v1" and
// the raw ID, length-prefixed as above.
//
// The tenant is the namespace and not part of any key; the controller sends
// "<namespace>/<key>" downstream as the Idempotency-Key.
//
// # Requests and writes
//
// Invoke sends one server-side apply (PATCH, application/apply-patch+yaml,
// fieldManager=toolledger-sdk, without force) of apiVersion, kind,
// metadata.name, metadata.namespace and spec. Parameters are canonicalized
// first, so an identical intent is applied as identical bytes. The API
// server answers
//
//   - 201 Created: the key was new; one etcd write.
//   - 200 OK: the key already records this request (Outcome.Deduplicated);
//     nothing changes, so no etcd write and the resourceVersion stays.
//   - 422 Invalid with the message "spec is immutable: this idempotency key
//     (metadata.name) already records a different request": the key records
//     a different request; a *DuplicateConflictError, no write, no
//     execution.
//
// A key whose record was deleted (a GitOps prune, kubectl delete, the
// tool's recordRetention) is created again (201), and the controller answers
// it from the key's Tombstone without executing it: the same request settles
// with the original outcome and Outcome.Deduplicated; a different one
// settles Failed and Invoke returns a *DuplicateConflictError.
//
// An action that has already settled (Succeeded, Failed or Escalated) is
// returned at once: a duplicate invocation of a finished intent costs
// exactly one request and no write. Otherwise Invoke waits in the Client's
// watch of the namespace's ToolActions and returns when the action settles.
// One such watch is open per Client and namespace while invocations wait
// there: the first opens it, from the resourceVersion its apply returned,
// and it closes 5 seconds after the last one returned (or at once, should
// its stream end with no one waiting). An invocation alone costs two
// requests (the apply and the watch); one made while the watch is open, the
// apply alone. Only when the watch ends while invocations wait does the
// Client send more: a new watch from the last version it saw; and when that
// version has expired (410 Gone), a list of each waiting action, by name,
// to learn a version to watch from. An invocation that finds a watch opened
// only while it applied lists its action once, in case the watch passed its
// changes already. It never polls.
//
// While it is open, the watch brings the Client every change of every
// ToolAction in the namespace, whoever invoked it: an agent that shares a
// namespace with much busier invokers decodes their changes too, and
// should have a namespace (a tenant) of its own.
//
// The no-write duplicate, and the refusal of any difference, hold for
// invokers that share the field manager, as they do by default. Under
// another manager an identical request costs one write recording the
// co-ownership, a differing value is refused with 409 Conflict (also a
// *DuplicateConflictError), and an omitted field goes unnoticed (see
// WithFieldManager).
//
// Invoke does not retry a failed apply: calling it again with the same
// Request is safe and, when the first call did record the intent, free of
// writes.
//
// The caller needs create, patch, list and watch on toolactions in its
// namespace (create because an apply that creates is authorized as one; list
// and watch of the whole namespace, not of single names).
//
// # Outcomes, not retries
//
// Invoke waits through every transient phase, Unknown included, until the
// action is Succeeded, Failed or Escalated, and returns those with a nil
// error: an Escalated action awaits a human (a ToolResolution) and must not
// be retried under a new key. When the caller's context ends first, Invoke
// returns the last outcome it saw and an error wrapping the context's error.
// The intent is recorded and continues; invoke it again with the same
// Request to learn how it ended.
//
// # Approvals
//
// An intent of a tool that requires approval returns at once, with a nil
// error, as soon as it awaits one (Outcome.AwaitingApproval): a human
// approves its request digest (Outcome.RequestDigest) with a ToolApproval,
// and never silently while Invoke blocks. Invoke the same Request again with
// WaitForApproval to wait through the decision; a denied intent ends Failed
// with class Denied. Outcome.RequestedBy is the user the API server stamped
// as the intent's creator, beside the principals the caller claims in its
// Provenance; Outcome.Approval names the approval applied and its approver.
//
// # Delegation
//
// A sub-agent that carries out an intent on behalf of its caller invokes the
// caller's Request, key included (Delegate); it never derives a key of its
// own, which would make the same intent two. Provenance (run, step, parent
// task, trace, principals) is recorded in the spec and sent downstream
// unchanged; as part of the request it must be the same on every invocation.
//
// # Tracing
//
// Invoke is an OpenTelemetry span (invoke <tool>) of the program's tracer
// provider, a child of the span in its ctx; the manager's attempt and
// lookup spans continue it, and the downstream request carries their
// traceparent. The SDK needs only the OpenTelemetry API: an agent that
// installs no provider records nothing. A per-call span goes in metadata
// (the toolledger.dev/traceparent annotation), never in Provenance, which
// must not change between invocations. docs/operations.md, "Traces", lists
// the spans' attributes.
package sdk
