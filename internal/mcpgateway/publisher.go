package mcpgateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/toolcontract"
	"github.com/toolledger/toolledger/pkg/sdk"
)

// catalogSyncTimeout bounds the first read of the catalog.
const catalogSyncTimeout = time.Minute

// entry is one published tool: what the agent sees, and what a call of it
// records.
type entry struct {
	ref    v1alpha1.ToolReference
	spec   v1alpha1.ToolSpec
	schema *toolcontract.Schema
	tool   *mcp.Tool
	// fingerprint changes whenever what is published or recorded does.
	fingerprint string
}

// publisher publishes the namespace's catalog as the MCP server's tools,
// and keeps them equal to its ready Tools and the ready ClusterTools that
// admit it. A Tool shadows a ClusterTool of the
// same name, as the namespace's own choice.
type publisher struct {
	namespace    string
	clusterTools bool
	cache        cache.Cache
	server       *mcp.Server
	handler      func(*entry) mcp.ToolHandler
	log          logr.Logger

	// changed coalesces informer events into one sync.
	changed chan struct{}

	mu        sync.Mutex
	published map[string]*entry
}

func scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

func newPublisher(opts Options, s *runtime.Scheme, server *mcp.Server, handler func(*entry) mcp.ToolHandler) (*publisher, error) {
	byObject := map[client.Object]cache.ByObject{
		&v1alpha1.Tool{}: {Namespaces: map[string]cache.Config{opts.Namespace: {}}},
	}
	if opts.ClusterTools {
		byObject[&v1alpha1.ClusterTool{}] = cache.ByObject{}
		// The namespace's labels decide which ClusterTools admit it; a list
		// by name needs RBAC on that one namespace only (resourceNames).
		byObject[&corev1.Namespace{}] = cache.ByObject{Field: fields.OneTermEqualSelector("metadata.name", opts.Namespace)}
	}
	c, err := cache.New(opts.Config, cache.Options{Scheme: s, ByObject: byObject})
	if err != nil {
		return nil, fmt.Errorf("cannot create the catalog cache: %w", err)
	}
	return &publisher{
		namespace: opts.Namespace, clusterTools: opts.ClusterTools, cache: c, server: server, handler: handler,
		log: opts.Logger.WithName("catalog"), changed: make(chan struct{}, 1), published: map[string]*entry{},
	}, nil
}

// run starts the cache, publishes the first catalog and returns; it follows
// changes until ctx ends.
func (c *publisher) run(ctx context.Context) error {
	objects := []client.Object{&v1alpha1.Tool{}}
	if c.clusterTools {
		objects = append(objects, &v1alpha1.ClusterTool{}, &corev1.Namespace{})
	}
	poke := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.poke() },
		UpdateFunc: func(any, any) { c.poke() },
		DeleteFunc: func(any) { c.poke() },
	}
	for _, obj := range objects {
		informer, err := c.cache.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("cannot watch %T: %w", obj, err)
		}
		if _, err := informer.AddEventHandler(poke); err != nil {
			return fmt.Errorf("cannot follow %T: %w", obj, err)
		}
	}
	go func() {
		if err := c.cache.Start(ctx); err != nil {
			c.log.Error(err, "The catalog cache stopped")
		}
	}()
	// A gateway that may not read its catalog says so rather than wait.
	syncCtx, cancel := context.WithTimeout(ctx, catalogSyncTimeout)
	defer cancel()
	if !c.cache.WaitForCacheSync(syncCtx) {
		return fmt.Errorf("cannot read the catalog of namespace %s within %s (may the gateway list and watch its tools, clustertools and the namespace?): %w",
			c.namespace, catalogSyncTimeout, context.Cause(syncCtx))
	}
	if err := c.sync(ctx); err != nil {
		return err
	}
	go c.follow(ctx)
	return nil
}

func (c *publisher) poke() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

func (c *publisher) follow(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.changed:
		}
		if err := c.sync(ctx); err != nil {
			c.log.Error(err, "Cannot publish the catalog; retrying")
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
				c.poke()
			}
		}
	}
}

// sync publishes what the cache holds: it adds or replaces the tools whose
// fingerprint changed and removes those gone, so an unchanged catalog sends
// no list-changed notification.
func (c *publisher) sync(ctx context.Context) error {
	desired, err := c.desired(ctx)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var gone []string
	for name := range c.published {
		if _, ok := desired[name]; !ok {
			gone = append(gone, name)
		}
	}
	if len(gone) > 0 {
		c.server.RemoveTools(gone...)
		c.log.Info("Tools withdrawn", "tools", gone)
	}
	for name, e := range desired {
		if old, ok := c.published[name]; ok && old.fingerprint == e.fingerprint {
			desired[name] = old
			continue
		}
		c.server.AddTool(e.tool, c.handler(e))
		c.log.Info("Tool published", "tool", name, "kind", e.ref.Kind, "class", e.spec.IdempotencyClass)
	}
	c.published = desired
	return nil
}

// lookup is the published tool of the name.
func (c *publisher) lookup(name string) (*entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.published[name]
	return e, ok
}

func (c *publisher) names() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.published))
}

// desired is the catalog as the cache holds it now.
func (c *publisher) desired(ctx context.Context) (map[string]*entry, error) {
	desired := map[string]*entry{}
	if c.clusterTools {
		var namespace corev1.Namespace
		if err := c.cache.Get(ctx, types.NamespacedName{Name: c.namespace}, &namespace); err != nil {
			return nil, fmt.Errorf("cannot read namespace %s: %w", c.namespace, err)
		}
		var clusterTools v1alpha1.ClusterToolList
		if err := c.cache.List(ctx, &clusterTools); err != nil {
			return nil, fmt.Errorf("cannot list clustertools: %w", err)
		}
		for i := range clusterTools.Items {
			t := &clusterTools.Items[i]
			if admitted, err := t.Spec.Admits(namespace.Labels); err != nil || !admitted || !ready(t.Status, t.Generation) {
				continue
			}
			c.add(desired, v1alpha1.KindClusterTool, t.Name, t.Spec.ToolSpec)
		}
	}
	var tools v1alpha1.ToolList
	if err := c.cache.List(ctx, &tools, client.InNamespace(c.namespace)); err != nil {
		return nil, fmt.Errorf("cannot list the tools of namespace %s: %w", c.namespace, err)
	}
	for i := range tools.Items {
		t := &tools.Items[i]
		if !ready(t.Status, t.Generation) {
			continue
		}
		if shadowed, ok := desired[t.Name]; ok {
			c.log.V(1).Info("A Tool shadows the ClusterTool of its name", "tool", t.Name, "clustertool", shadowed.ref.Name)
		}
		c.add(desired, v1alpha1.KindTool, t.Name, t.Spec)
	}
	return desired, nil
}

// ready reports a tool the controller has checked, in its current
// generation, and found usable: others would only fail their calls.
func ready(status v1alpha1.ToolStatus, generation int64) bool {
	condition := meta.FindStatusCondition(status.Conditions, v1alpha1.ConditionToolReady)
	return condition != nil && condition.Status == metav1.ConditionTrue && condition.ObservedGeneration == generation
}

func (c *publisher) add(desired map[string]*entry, kind, name string, spec v1alpha1.ToolSpec) {
	e, err := newEntry(kind, name, spec)
	if err != nil {
		c.log.Info("Tool not published", "tool", name, "kind", kind, "reason", err.Error())
		return
	}
	desired[name] = e
}

func newEntry(kind, name string, spec v1alpha1.ToolSpec) (*entry, error) {
	schema, err := toolcontract.CompileSchema(spec.ParametersSchema)
	if err != nil {
		return nil, err
	}
	input, err := inputSchema(spec.ParametersSchema, spec.ClientKeyRequired)
	if err != nil {
		return nil, err
	}
	hints := spec.IdempotencyClass.Hints()
	tool := &mcp.Tool{
		Name:        name,
		Title:       spec.Operation + " " + spec.Version,
		Description: description(spec),
		InputSchema: input,
		// Every call answers with the same record: its outcome.
		OutputSchema: outcomeSchema,
		Annotations: &mcp.ToolAnnotations{
			ReadOnlyHint:    hints.ReadOnlyHint,
			DestructiveHint: &hints.DestructiveHint,
			IdempotentHint:  hints.IdempotentHint,
			OpenWorldHint:   &hints.OpenWorldHint,
		},
		Meta: mcp.Meta{
			metaPrefix + "kind":             kind,
			metaPrefix + "idempotencyClass": string(spec.IdempotencyClass),
			metaPrefix + "approvalRequired": spec.ApprovalRequired,
		},
	}
	fingerprint, err := json.Marshal(struct {
		Tool *mcp.Tool
		Spec v1alpha1.ToolSpec
	}{tool, spec})
	if err != nil {
		return nil, fmt.Errorf("cannot encode the tool: %w", err)
	}
	return &entry{ref: v1alpha1.ToolReference{Kind: kind, Name: name}, spec: spec, schema: schema, tool: tool, fingerprint: string(fingerprint)}, nil
}

// inputSchema publishes the parametersSchema as the tool's JSON Schema. It
// is decoded into the structural schema type and encoded again, so only the
// keywords the controller checks are published; parameters are always an
// object. It adds the commerce bindings' meta member, which carries the
// caller's key and is never a parameter, and requires the key there when
// the Tool requires one.
func inputSchema(raw *apiextensionsv1.JSON, keyRequired bool) (json.RawMessage, error) {
	var props apiextensionsv1.JSONSchemaProps
	if raw != nil && len(raw.Raw) > 0 {
		if err := json.Unmarshal(raw.Raw, &props); err != nil {
			return nil, fmt.Errorf("parametersSchema is not an OpenAPI v3 schema: %w", err)
		}
	}
	switch props.Type {
	case "":
		props.Type = "object"
	case "object":
	default:
		return nil, fmt.Errorf("parametersSchema has type %q, but parameters are an object", props.Type)
	}
	if _, declared := props.Properties[envelopeMember]; declared {
		return nil, fmt.Errorf("parametersSchema declares a parameter %q, which MCP's commerce bindings (ACP, UCP) reserve for a call's metadata; rename it", envelopeMember)
	}
	clientKey := apiextensionsv1.JSONSchemaProps{Type: "string", MinLength: ptr.To[int64](1), MaxLength: ptr.To[int64](sdk.MaxClientKeyLength), Pattern: "^[ -~]+$"}
	envelopeSchema := apiextensionsv1.JSONSchemaProps{
		Type: "object",
		Description: "The call's metadata, never a parameter. Its " + acpKeyMember + " (ACP) or " + ucpKeyMember + " (UCP) is the caller's idempotency key: " +
			"one per intent, the same on every retry of it.",
		Properties: map[string]apiextensionsv1.JSONSchemaProps{acpKeyMember: clientKey, ucpKeyMember: clientKey},
	}
	if keyRequired {
		envelopeSchema.AnyOf = []apiextensionsv1.JSONSchemaProps{{Required: []string{acpKeyMember}}, {Required: []string{ucpKeyMember}}}
		props.Required = append(props.Required, envelopeMember)
	}
	if props.Properties == nil {
		props.Properties = map[string]apiextensionsv1.JSONSchemaProps{}
	}
	props.Properties[envelopeMember] = envelopeSchema
	encoded, err := json.Marshal(props)
	if err != nil {
		return nil, fmt.Errorf("cannot encode the parametersSchema: %w", err)
	}
	return encoded, nil
}

// description is the Tool's own, followed by what the ledger promises for
// its class, so that a model reads both where it decides to call.
func description(spec v1alpha1.ToolSpec) string {
	var b bytes.Buffer
	if spec.Description != "" {
		b.WriteString(spec.Description)
		b.WriteString("\n\n")
	}
	fmt.Fprintf(&b, "Operation %s, version %s, idempotency class %s: %s", spec.Operation, spec.Version, spec.IdempotencyClass, classPromise[spec.IdempotencyClass])
	if spec.ApprovalRequired {
		b.WriteString(" Every call waits for a human's approval before it runs.")
	}
	if spec.ClientKeyRequired {
		b.WriteString(" Every call carries its own idempotency key in arguments.meta: mint one per intent and send the same key on every retry of it.")
	}
	return b.String()
}

var classPromise = map[v1alpha1.IdempotencyClass]string{
	v1alpha1.ReadOnly:            "it changes nothing.",
	v1alpha1.NaturallyIdempotent: "repeating it has no further effect, and the ledger records each intent once.",
	v1alpha1.KeyProtected:        "the downstream takes the ledger's key, so a repeated call has one effect.",
	v1alpha1.Compensatable:       "each intent has one effect, which a later compensating action can offset.",
	v1alpha1.NonRepeatable:       "the effect cannot be undone; an unknown outcome goes to a human, never to a blind retry.",
}
