package archive

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"k8s.io/apimachinery/pkg/types"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// pruneLock is the advisory lock one replica holds while it prunes, so
// that replicas do not delete the same rows side by side.
const pruneLock = 0x746f6f6c70727565 // "toolprue"

// pruneBatch bounds one delete, so that pruning a long history holds no
// lock for long and never blocks the key check or a keep.
const pruneBatch = 1000

// Cutoff says which records may go: those of one tool (Kind and Name, and
// Namespace for a Tool; "" for a ClusterTool's, in every namespace) that
// finished before Before, and, of those moved from Tombstones, which keep
// the tool's own keyRetention, before TombstonesBefore (the zero time:
// none). A record whose answers stated a keptUntil goes only if that was
// before KeptBefore (the zero time: none such goes).
type Cutoff struct {
	Kind, Namespace, Name string
	Before                time.Time
	TombstonesBefore      time.Time
	KeptBefore            time.Time
}

// Prune deletes the records each cutoff lets go, in batches, and returns
// how many it deleted. One replica prunes at a time: when another holds
// the prune lock, Prune returns 0 at once.
func (s *Store) Prune(ctx context.Context, cutoffs []Cutoff) (int64, error) {
	return s.pruning(ctx, func(conn *pgx.Conn) (int64, error) {
		var pruned int64
		for _, c := range cutoffs {
			n, err := pruneBatches(ctx, conn, `SELECT toolledger_prune_tool($1, $2, $3, $4, $5, $6, $7)`,
				c.Kind, c.Namespace, c.Name, c.Before, c.TombstonesBefore, c.KeptBefore, pruneBatch)
			pruned += n
			observe("prune", err)
			if err != nil {
				return pruned, fmt.Errorf("%w: cannot prune the records of %s: %w", ErrUnavailable, c, err)
			}
		}
		return pruned, nil
	})
}

// LifeFate says what becomes of the records of one life of a namespace's
// name that is not the current one's, when the history retention prunes
// them.
type LifeFate int

const (
	// LifeKept is the current life, or one it adopted: its records are its
	// history, pruned by their tools' retentions.
	LifeKept LifeFate = iota
	// LifeReleased is a life released for the namespace now under the name: its
	// keys answer nobody, and its records go once the history retention
	// passed since they were archived.
	LifeReleased
	// LifeUnclaimed is a life whose name is gone, or whose namespace has not decided
	// about the life: its records keep their keys for their retention (a
	// namespace restored from a backup finds them), then the history
	// retention prunes them.
	LifeUnclaimed
)

// FateOf is the fate of life, a life of the name of ns, the namespace now
// under it, by ns's decisions about its earlier lives: kept when it is
// ns's own or one ns adopted, released when ns released it, unclaimed
// while nobody decided.
func FateOf(ns Namespace, life types.UID, decisions []v1alpha1.EarlierLifeDecision) LifeFate {
	if life == ns.UID {
		return LifeKept
	}
	switch d := v1alpha1.DecisionFor(decisions, ns.UID, life); {
	case d == nil:
		return LifeUnclaimed
	case d.Spec.Decision == v1alpha1.LifeAdopt:
		return LifeKept
	}
	return LifeReleased
}

// Life is what the sweep knows of one life of a namespace's name: the
// namespace now under the name (nil when there is none) and the life's
// fate.
type Life struct {
	Current *Namespace
	Fate    LifeFate
}

// NamespaceCutoffs say which records of the lives not kept may go: those
// archived before Before, and, of an unclaimed life, that finished before
// KeysBefore (the longest key retention of the tools; the zero time keeps
// them for good) and stated no keptUntil after KeptBefore.
type NamespaceCutoffs struct {
	Before, KeysBefore, KeptBefore time.Time
}

// PruneNamespaces deletes the records of the lives of namespaces' names
// that are not theirs now: lives of namespaces gone, or created again
// under their name (lifeOf gives each one's fate), by cutoffs. It returns
// how many it deleted; one replica prunes at a time.
func (s *Store) PruneNamespaces(ctx context.Context, lifeOf func(name string, uid types.UID) (Life, error), cutoffs NamespaceCutoffs) (int64, error) {
	rows, err := s.keys.Query(ctx, `SELECT namespace, namespace_uid FROM toolledger_namespaces ORDER BY namespace, namespace_uid`)
	var known [][2]string
	if err == nil {
		known, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) ([2]string, error) {
			var ns [2]string
			return ns, row.Scan(&ns[0], &ns[1])
		})
	}
	if err != nil {
		observe("prune", err)
		return 0, fmt.Errorf("%w: cannot list the archive's namespaces: %w", ErrUnavailable, err)
	}
	return s.pruning(ctx, func(conn *pgx.Conn) (int64, error) {
		var pruned int64
		for _, ns := range known {
			name, uid := ns[0], ns[1]
			life, err := lifeOf(name, types.UID(uid))
			if err != nil {
				return pruned, err
			}
			// The records of before the archive kept uids that are the
			// current namespace's are those created since it was.
			createdBefore := infinity
			if life.Current != nil {
				createdBefore = life.Current.Created
			}
			keysBefore, keptBefore := infinity, infinity
			switch {
			case uid != "" && life.Current != nil && string(life.Current.UID) == uid, life.Fate == LifeKept:
				continue
			case life.Fate == LifeUnclaimed:
				keysBefore, keptBefore = cutoffs.KeysBefore, cutoffs.KeptBefore
			}
			n, err := pruneBatches(ctx, conn, `SELECT toolledger_prune_namespace($1, $2, $3, $4, $5, $6, $7)`, name, uid, createdBefore, cutoffs.Before,
				keysBefore, keptBefore, pruneBatch)
			pruned += n
			observe("prune", err)
			if err != nil {
				return pruned, fmt.Errorf("%w: cannot prune the records of an earlier life of namespace %s (uid %q): %w", ErrUnavailable, name, uid, err)
			}
		}
		return pruned, nil
	})
}

// infinity is a time after every record's.
var infinity = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// pruning runs prune on a connection that holds the prune lock, unless
// another replica holds it, and counts what it deleted.
func (s *Store) pruning(ctx context.Context, prune func(*pgx.Conn) (int64, error)) (int64, error) {
	conn, err := s.keys.Acquire(ctx)
	if err != nil {
		observe("prune", err)
		return 0, fmt.Errorf("%w: cannot prune: %w", ErrUnavailable, err)
	}
	defer conn.Release()
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, int64(pruneLock)).Scan(&locked); err != nil || !locked {
		observe("prune", err)
		if err != nil {
			return 0, fmt.Errorf("%w: cannot take the prune lock: %w", ErrUnavailable, err)
		}
		return 0, nil
	}
	defer unlock(ctx, conn)
	pruned, err := prune(conn.Conn())
	recordsPruned.Add(float64(pruned))
	return pruned, err
}

// pruneBatches calls a pruning function, which runs as the schema's owner
// (so that the manager's role needs no DELETE) and leaves each pruned
// record's link in the chain, a batch at a time until a batch is short.
func pruneBatches(ctx context.Context, conn *pgx.Conn, call string, args ...any) (int64, error) {
	var pruned int64
	for {
		var n int64
		if err := conn.QueryRow(ctx, call, args...).Scan(&n); err != nil {
			return pruned, err
		}
		pruned += n
		if n < pruneBatch {
			return pruned, nil
		}
	}
}

func (c Cutoff) String() string {
	if c.Namespace == "" {
		return c.Kind + " " + c.Name
	}
	return c.Kind + " " + c.Namespace + "/" + c.Name
}

// unlock releases the prune lock, or closes the connection that holds it:
// a session lock left on a pooled connection would keep every replica from
// pruning.
func unlock(ctx context.Context, conn *pgxpool.Conn) {
	var released bool
	err := conn.QueryRow(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(pruneLock)).Scan(&released)
	if err != nil || !released {
		_ = conn.Hijack().Close(context.WithoutCancel(ctx))
	}
}
