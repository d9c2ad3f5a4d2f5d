package sdk

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/duplicates"
	"github.com/toolledger/toolledger/pkg/toolref"
)

// WithMetrics has the Client count, on reg, the duplicates and key
// conflicts it meets, under the names the manager uses with source="sdk":
// a duplicate apply writes nothing, so it never reaches the controller and
// only the caller can count it. The series are labelled by namespace and
// tool, never by key:
//
//   - toolledger_duplicate_hits_total: invocations the API server found
//     recorded with the same request;
//   - toolledger_key_conflicts_total: invocations refused because the key
//     records a different request;
//   - toolledger_duplicate_age_seconds: for a duplicate of a finished
//     action, how long after its completion it arrived;
//   - toolledger_duplicate_age_retention_ratio: that age as a fraction of
//     the tool's keyRetention, when the Client may read the Tool (the
//     agent role may) or, for a ClusterTool, the ClusterTool and the
//     action's namespace, whose labels decide whether the ClusterTool
//     admits it; above 0.8 a later retry may outlive the key.
//
// Registering on a registry that already holds these collectors fails
// NewClient: give each Client its own registry, or share one Client.
func WithMetrics(reg prometheus.Registerer) Option {
	return func(c *Client) { c.metricsOn = reg }
}

// sdkMetrics are a Client's collectors.
type sdkMetrics struct {
	hits, conflicts *prometheus.CounterVec
	age, ratio      *prometheus.HistogramVec

	mu sync.Mutex
	// retentions caches each tool's keyRetention (nil: none, or unreadable)
	// for retentionTTL, so that duplicates cost no read of their tool each.
	retentions map[toolName]cachedRetention
}

type toolName struct{ namespace, kind, name string }

type cachedRetention struct {
	retention *time.Duration
	read      time.Time
}

const retentionTTL = 5 * time.Minute

func newSDKMetrics(reg prometheus.Registerer) (*sdkMetrics, error) {
	labels := []string{"namespace", "tool_kind", "tool", "source"}
	m := &sdkMetrics{
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: duplicates.HitsName,
			Help: "Repeats of a recorded intent answered without a second effect; source=sdk: the API server found the key recorded with the same request.",
		}, labels),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: duplicates.KeyConflictsName,
			Help: "Keys used again for a different request, refused without executing it; source=sdk: the API server refused the apply.",
		}, labels),
		age: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    duplicates.AgeName,
			Help:    "How long after the first attempt's completion a duplicate arrived.",
			Buckets: duplicates.AgeBuckets,
		}, labels),
		ratio: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    duplicates.RetentionRatioName,
			Help:    "A duplicate's age as a fraction of its tool's keyRetention (tools with a keyRetention only).",
			Buckets: duplicates.RetentionRatioBuckets,
		}, labels),
		retentions: map[toolName]cachedRetention{},
	}
	for _, c := range []prometheus.Collector{m.hits, m.conflicts, m.age, m.ratio} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func sdkLabels(namespace string, ref v1alpha1.ToolReference) prometheus.Labels {
	return prometheus.Labels{"namespace": namespace, "tool_kind": ref.KindOrDefault(), "tool": ref.Name, "source": "sdk"}
}

// conflict counts a refused invocation of req.
func (m *sdkMetrics) conflict(req Request) {
	if m != nil {
		m.conflicts.With(sdkLabels(req.Namespace, v1alpha1.ToolReference{Kind: req.ToolKind, Name: req.Tool})).Inc()
	}
}

// duplicate counts an invocation the API server found recorded, with its
// age when the action has finished.
func (m *sdkMetrics) duplicate(ctx context.Context, c *Client, action *v1alpha1.ToolAction) {
	if m == nil {
		return
	}
	labels := sdkLabels(action.Namespace, action.Spec.ToolRef)
	m.hits.With(labels).Inc()
	done := action.Status.CompletionTime
	if done == nil {
		return
	}
	age := max(time.Since(done.Time), 0)
	m.age.With(labels).Observe(age.Seconds())
	if retention := m.retention(ctx, c, action.Namespace, action.Spec.ToolRef); retention != nil && *retention > 0 {
		m.ratio.With(labels).Observe(age.Seconds() / retention.Seconds())
	}
}

// retention is the tool's keyRetention, read at most every retentionTTL;
// nil when it has none or cannot be read.
func (m *sdkMetrics) retention(ctx context.Context, c *Client, namespace string, ref v1alpha1.ToolReference) *time.Duration {
	key := toolName{namespace, ref.KindOrDefault(), ref.Name}
	m.mu.Lock()
	cached, found := m.retentions[key]
	m.mu.Unlock()
	if found && time.Since(cached.read) < retentionTTL {
		return cached.retention
	}
	var retention *time.Duration
	if tool, err := toolref.Find(ctx, restTools{c.rest}, namespace, ref); err == nil && tool.Spec.KeyRetention != nil {
		retention = &tool.Spec.KeyRetention.Duration
	}
	m.mu.Lock()
	m.retentions[key] = cachedRetention{retention: retention, read: time.Now()}
	m.mu.Unlock()
	return retention
}

// restTools reads tools for toolref.Find through the Client's RESTClient.
type restTools struct{ rest rest.Interface }

func (t restTools) Tool(ctx context.Context, namespace, name string) (*v1alpha1.Tool, error) {
	var tool v1alpha1.Tool
	if err := t.rest.Get().Namespace(namespace).Resource("tools").Name(name).Do(ctx).Into(&tool); err != nil {
		return nil, ignoreNotFound(err)
	}
	return &tool, nil
}

func (t restTools) ClusterTool(ctx context.Context, name string) (*v1alpha1.ClusterTool, error) {
	var tool v1alpha1.ClusterTool
	if err := t.rest.Get().Resource("clustertools").Name(name).Do(ctx).Into(&tool); err != nil {
		return nil, ignoreNotFound(err)
	}
	return &tool, nil
}

func (t restTools) NamespaceLabels(ctx context.Context, namespace string) (map[string]string, error) {
	return toolref.NamespaceLabelsOver(ctx, t.rest, namespace)
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
