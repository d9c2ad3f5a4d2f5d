package archive

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"k8s.io/apimachinery/pkg/types"
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

// guardingPage bounds the keys one query of GuardingKeys reads.
const guardingPage = 500

// GuardingKeys hands each key the archive guards to do, with the newest
// record that guards it in each life of its namespace's name (its
// NamespaceUID names the life: "" for the records archived before the
// archive kept uids), newest first, in order of namespace and key, a page
// of keys at a time.
func (s *Store) GuardingKeys(ctx context.Context, do func([]*Record) error) error {
	var afterNamespace, afterKey string
	for {
		rows, err := s.reads.Query(ctx, `
WITH page AS (SELECT DISTINCT namespace, key FROM toolledger_records
	WHERE guards_key AND (namespace, key) > ($1, $2) ORDER BY namespace, key LIMIT $3)
SELECT * FROM (SELECT DISTINCT ON (namespace, key, coalesce(namespace_uid, '')) `+recordColumns+`
	FROM toolledger_records JOIN page USING (namespace, key)
	WHERE guards_key
	ORDER BY namespace, key, coalesce(namespace_uid, ''), completion_time DESC) lives
ORDER BY namespace, key, completion_time DESC`, afterNamespace, afterKey, guardingPage)
		var page []Record
		if err == nil {
			page, err = pgx.CollectRows(rows, scanRecord)
		}
		observe("read", err)
		if err != nil {
			return fmt.Errorf("%w: cannot list the guarded keys: %w", ErrUnavailable, err)
		}
		keys := 0
		for start := 0; start < len(page); keys++ {
			end := start + 1
			for end < len(page) && page[end].Namespace == page[start].Namespace && page[end].Key == page[start].Key {
				end++
			}
			lives := make([]*Record, 0, end-start)
			for i := start; i < end; i++ {
				lives = append(lives, &page[i])
			}
			if err := do(lives); err != nil {
				return err
			}
			start = end
		}
		if keys < guardingPage {
			return nil
		}
		afterNamespace, afterKey = page[len(page)-1].Namespace, page[len(page)-1].Key
	}
}

// LifeIn is the life of ns's name that r was archived from: ns's own uid
// when r was archived from it, or, archived before the archive kept uids,
// when its action was created after ns was; else r's NamespaceUID ("" for
// such a record of an earlier life).
func (r *Record) LifeIn(ns Namespace) types.UID {
	if r.NamespaceUID != "" {
		return r.NamespaceUID
	}
	var doc struct {
		Metadata struct {
			CreationTimestamp time.Time `json:"creationTimestamp"`
		} `json:"metadata"`
	}
	if json.Unmarshal(r.Action, &doc) == nil && !doc.Metadata.CreationTimestamp.Before(ns.Created) {
		return ns.UID
	}
	return ""
}
