package archivebinding

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/toolledger/toolledger/internal/chainstate"
)

// DefaultSettle is how long a new binding stands before its archive keeps
// a record: the managers already running without the archive learn of the
// binding from their watch meanwhile, before any key lives in the archive
// alone. A manager that starts later reads it before it reconciles.
const DefaultSettle = 15 * time.Second

// Guard tells a manager whether the binding lets it dispatch a new key,
// and keep records in its archive. It reads the binding from the manager's
// cache, which watches the one ConfigMap.
type Guard struct {
	// Reader reads the binding: the manager's cache.
	Reader    client.Reader
	Namespace string
	// Archive is the manager's archive's identity; "" without one.
	Archive string
	Log     logr.Logger
	// Every is how often Start looks at the binding again, to log a change.
	Every time.Duration
	// Settle is how long a new binding stands before the archive keeps a
	// record (DefaultSettle).
	Settle time.Duration
}

// Check returns why this manager must not dispatch a new key (a
// *RefusedError), an error when the binding cannot be read, or nil. A
// binding gone from a cluster that keeps its keys in an archive (the
// archived chains' marks stay in the operator namespace until it is
// decommissioned) holds a manager without an archive as a binding to an
// unknown archive would.
func (g *Guard) Check(ctx context.Context) error {
	b, err := Read(ctx, g.Reader, g.Namespace)
	if err != nil {
		return err
	}
	if b == nil && g.Archive == "" {
		if kept, err := archiveWasUsed(ctx, g.Reader, g.Namespace); err != nil || kept != "" {
			if err != nil {
				return err
			}
			return &RefusedError{Missing: kept}
		}
	}
	return Refusal(b, g.Archive)
}

// archiveWasUsed names a mark the managers keep in the operator namespace
// of a chain whose records left etcd for an archive not decommissioned
// since (decommissioning deletes them); "" when there is none.
func archiveWasUsed(ctx context.Context, reader client.Reader, namespace string) (string, error) {
	var list corev1.ConfigMapList
	if err := reader.List(ctx, &list, client.InNamespace(namespace), client.HasLabels{chainstate.LabelMark}, client.Limit(1)); err != nil {
		return "", fmt.Errorf("cannot list the archived chains' marks: %w", err)
	}
	if len(list.Items) > 0 {
		return list.Items[0].Name, nil
	}
	return "", nil
}

// ErrNotSettled is MayKeep's answer while the binding is new, or missing.
var ErrNotSettled = errors.New("the archive binding is not settled")

// ErrReleased is MayKeep's answer once the archive was decommissioned: the
// ledger keeps its keys in Tombstones again.
var ErrReleased = errors.New("the ledger's archive was decommissioned")

// MayKeep returns nil when the manager's archive may keep a record at now:
// the ledger has been bound to it for g.Settle.
func (g *Guard) MayKeep(ctx context.Context, now time.Time) error {
	b, err := Read(ctx, g.Reader, g.Namespace)
	switch {
	case err != nil:
		return err
	case b != nil && b.State == Decommissioned:
		return fmt.Errorf("%w at %s: keys are kept in Tombstones", ErrReleased, b.DecommissionedAt.UTC().Format(time.RFC3339))
	case b == nil || b.Archive != g.Archive:
		return fmt.Errorf("%w: the ledger is not bound to this manager's archive %s (ConfigMap %s)", ErrNotSettled, g.Archive, Key(g.Namespace))
	case now.Before(b.BoundAt.Add(g.Settle)):
		return fmt.Errorf("%w: the ledger was bound to archive %s at %s; records are kept from %s on", ErrNotSettled, g.Archive,
			b.BoundAt.UTC().Format(time.RFC3339), b.BoundAt.Add(g.Settle).UTC().Format(time.RFC3339))
	}
	return nil
}

// TombstonesMoved reports whether the key check may leave Tombstones
// unread: the ledger is bound to this manager's archive, which every
// Tombstone written before it has moved into. The archive's own record of
// its decommissioning, read with each key (archive.Store.CheckKey), says
// when Tombstones are written again.
func (g *Guard) TombstonesMoved(ctx context.Context) (bool, error) {
	b, err := Read(ctx, g.Reader, g.Namespace)
	if err != nil {
		return false, err
	}
	return b != nil && b.State == InUse && b.Archive == g.Archive && !b.TombstonesMovedAt.IsZero(), nil
}

// Ready is a readiness check: a manager that must not dispatch is not
// ready, so that a rollout of managers without the archive the ledger is
// bound to stalls with the ready replicas still serving.
func (g *Guard) Ready(req *http.Request) error {
	return g.Check(req.Context())
}

// NeedLeaderElection is false: every replica checks keys.
func (g *Guard) NeedLeaderElection() bool { return false }

// Start logs, once the cache has the binding and whenever that changes,
// whether this manager refuses to dispatch, and sets the gauge.
func (g *Guard) Start(ctx context.Context) error {
	last := "unread"
	for {
		err := g.Check(ctx)
		message := ""
		if err != nil {
			message = err.Error()
		}
		var refused *RefusedError
		switch {
		case message == last:
		case errors.As(err, &refused):
			g.Log.Error(err, "Refusing to dispatch new keys")
		case err != nil:
			g.Log.Error(err, "Cannot read the archive binding; new keys wait")
		case last != "unread":
			g.Log.Info("The archive binding lets this manager dispatch again")
		}
		last = message
		refusing.Set(map[bool]float64{false: 0, true: 1}[err != nil])
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(g.Every):
		}
	}
}

var refusing = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "toolledger_archive_binding_refusing",
	Help: "1 while this manager dispatches no new key because the ledger is bound to an archive it does not use (docs/archive.md#the-archive-binding), or the binding cannot be read; 0 otherwise.",
})

func init() {
	metrics.Registry.MustRegister(refusing)
}
