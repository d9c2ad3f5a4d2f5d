package archive

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// decommissionLock is the advisory lock that every Keep holds shared and
// decommissioning takes alone: once Decommission returns, no record is
// being kept, and none will be. "tooldcom".
const decommissionLock = 0x746f6f6c64636f6d

// Decommission stops the archive keeping records, for good, and returns
// when it did. It waits for the records being kept to commit, so that
// GuardingKeys, run afterwards, sees every key the archive will ever
// guard. The archive still answers reads and key checks. It takes the
// schema owner's role (UPDATE on toolledger_archive); doing it again
// changes nothing.
func (s *Store) Decommission(ctx context.Context) (time.Time, error) {
	var at time.Time
	err := pgx.BeginFunc(ctx, s.keys, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(decommissionLock)); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `UPDATE toolledger_archive SET decommissioned_at = coalesce(decommissioned_at, now())
RETURNING decommissioned_at`).Scan(&at)
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("cannot decommission the archive (it takes the schema owner's role): %w", err)
	}
	return at.UTC(), nil
}

// Decommissioned reports whether the archive was decommissioned.
func (s *Store) Decommissioned(ctx context.Context) (bool, error) {
	var decommissioned bool
	err := s.keys.QueryRow(ctx, `SELECT decommissioned_at IS NOT NULL FROM toolledger_archive`).Scan(&decommissioned)
	observe("read", err)
	if err != nil {
		return false, fmt.Errorf("%w: cannot read whether the archive was decommissioned: %w", ErrUnavailable, err)
	}
	return decommissioned, nil
}

// guardingPage bounds the records one query of GuardingKeys reads.
const guardingPage = 500

// GuardingKeys hands each key the archive guards to do, with the newest
// record that guards it (the one the key check answers from), in order of
// namespace and key, a page at a time.
func (s *Store) GuardingKeys(ctx context.Context, do func(*Record) error) error {
	var afterNamespace, afterKey string
	for {
		rows, err := s.reads.Query(ctx, `
SELECT DISTINCT ON (namespace, key) `+recordColumns+`
FROM toolledger_records
WHERE guards_key AND (namespace, key) > ($1, $2)
ORDER BY namespace, key, completion_time DESC
LIMIT $3`, afterNamespace, afterKey, guardingPage)
		var page []Record
		if err == nil {
			page, err = pgx.CollectRows(rows, scanRecord)
		}
		observe("read", err)
		if err != nil {
			return fmt.Errorf("%w: cannot list the guarded keys: %w", ErrUnavailable, err)
		}
		for i := range page {
			if err := do(&page[i]); err != nil {
				return err
			}
		}
		if len(page) < guardingPage {
			return nil
		}
		afterNamespace, afterKey = page[len(page)-1].Namespace, page[len(page)-1].Key
	}
}
