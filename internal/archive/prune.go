package archive

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pruneLock is the advisory lock one replica holds while it prunes, so
// that replicas do not delete the same rows side by side.
const pruneLock = 0x746f6f6c70727565 // "toolprue"

// pruneBatch bounds one delete, so that pruning a long history holds no
// lock for long and never blocks the key check or a keep.
const pruneBatch = 1000

// Cutoff says which records may go: those of one tool (Kind and Name, and
// Namespace for a Tool; "" for a ClusterTool's, in every namespace) that
// finished before Before.
type Cutoff struct {
	Kind, Namespace, Name string
	Before                time.Time
}

// Prune deletes the records each cutoff lets go, in batches, and returns
// how many it deleted. One replica prunes at a time: when another holds
// the prune lock, Prune returns 0 at once.
func (s *Store) Prune(ctx context.Context, cutoffs []Cutoff) (int64, error) {
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
	var pruned int64
	for _, c := range cutoffs {
		n, err := pruneCutoff(ctx, conn.Conn(), c)
		pruned += n
		observe("prune", err)
		if err != nil {
			return pruned, fmt.Errorf("%w: cannot prune the records of %s: %w", ErrUnavailable, c, err)
		}
	}
	recordsPruned.Add(float64(pruned))
	return pruned, nil
}

// pruneCutoff deletes c's records a batch at a time, through
// toolledger_prune: it runs as the schema's owner, so that the manager's
// role needs no DELETE, and leaves each pruned record's link in the chain.
func pruneCutoff(ctx context.Context, conn *pgx.Conn, c Cutoff) (int64, error) {
	var pruned int64
	for {
		var n int64
		if err := conn.QueryRow(ctx, `SELECT toolledger_prune($1, $2, $3, $4, $5)`, c.Kind, c.Namespace, c.Name, c.Before, pruneBatch).Scan(&n); err != nil {
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
