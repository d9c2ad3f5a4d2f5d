package archive

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Replication is how the archive's server replicates what it commits, as
// the server itself says: whether a commit waits for standbys
// (synchronous_standby_names), and how many standbys stream from it.
type Replication struct {
	// SynchronousStandbyNames is the server's setting: empty, a commit is
	// durable on the server alone, and a failover to a standby may lose
	// it.
	SynchronousStandbyNames string `json:"synchronousStandbyNames"`
	// Standbys counts the WAL senders: standbys streaming from the server.
	Standbys int `json:"standbys"`
	// Synchronous counts the standbys the server reports as synchronous
	// (sync or quorum); -1 when the role may not read their state
	// (pg_read_all_stats grants it).
	Synchronous int `json:"synchronous"`
}

// Asynchronous reports a server whose standbys receive its commits after
// they return: a failover to one may land behind a record that left etcd.
func (r Replication) Asynchronous() bool {
	return r.Standbys > 0 && r.SynchronousStandbyNames == ""
}

// SynchronousConfigured reports a server whose commits wait for standbys.
func (r Replication) SynchronousConfigured() bool { return r.SynchronousStandbyNames != "" }

func (r Replication) String() string {
	switch {
	case r.SynchronousConfigured() && r.Synchronous >= 0:
		return fmt.Sprintf("synchronous (synchronous_standby_names %q; %d standbys, %d of them synchronous now)", r.SynchronousStandbyNames, r.Standbys, r.Synchronous)
	case r.SynchronousConfigured():
		return fmt.Sprintf("synchronous (synchronous_standby_names %q; %d standbys)", r.SynchronousStandbyNames, r.Standbys)
	case r.Standbys > 0:
		return fmt.Sprintf("asynchronous (%d standbys, synchronous_standby_names empty): a failover to a standby may lose the newest records", r.Standbys)
	}
	return "none (no standby streams from the server)"
}

// ReadReplication reads how the archive's server replicates its commits.
func (s *Store) ReadReplication(ctx context.Context) (Replication, error) {
	var r Replication
	err := s.keys.QueryRow(ctx, `SELECT current_setting('synchronous_standby_names'), count(*),
	CASE WHEN bool_or(sync_state IS NULL) THEN -1 ELSE count(*) FILTER (WHERE sync_state IN ('sync', 'quorum')) END
FROM pg_stat_replication`).Scan(&r.SynchronousStandbyNames, &r.Standbys, &r.Synchronous)
	observe("read", err)
	if err != nil {
		return r, fmt.Errorf("%w: cannot read the archive's replication: %w", ErrUnavailable, err)
	}
	if r.Standbys == 0 {
		r.Synchronous = 0
	}
	standbys.WithLabelValues().Set(float64(r.Standbys))
	synchronousCommit.WithLabelValues().Set(map[bool]float64{false: 0, true: 1}[r.SynchronousConfigured()])
	return r, nil
}

// ErrNotDurable is Keep's answer when it cannot tell that a record is
// durable where a failover would land: the record stays in etcd, and is
// kept again later.
var ErrNotDurable = errors.New("the archive cannot confirm the record durable on its synchronous standbys")

// syncWaits notes, per connection, a warning the server sent during a
// keep's transaction. The one a keep meets is the server's cancelled wait
// for its synchronous standbys (an administrator's pg_cancel_backend):
// "canceling wait for synchronous replication", beside a commit that
// succeeded on the server alone, which a failover may lose. The message is
// in the server's language, so any warning during a keep counts: nothing
// else in that transaction warns.
type syncWaits struct{ warned sync.Map }

func (w *syncWaits) onNotice(c *pgconn.PgConn, n *pgconn.Notice) {
	if n.SeverityUnlocalized == "WARNING" {
		w.warned.Store(c, n.Message)
	}
}

// keepDurably runs keep on a connection of pool whose session commits
// synchronously, and fails with ErrNotDurable when its commit returned
// without the standbys' confirmation.
func (w *syncWaits) keepDurably(ctx context.Context, pool *pgxpool.Pool, keep func(*pgxpool.Conn) error) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	pg := conn.Conn().PgConn()
	w.warned.Delete(pg)
	err = keep(conn)
	if warning, warned := w.warned.LoadAndDelete(pg); warned && err == nil {
		return fmt.Errorf("%w: the server warned as the record was kept: %s", ErrNotDurable, warning)
	}
	return err
}
