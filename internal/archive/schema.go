package archive

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// migrationLock is the advisory lock under which a manager migrates the
// schema, so that replicas starting at once apply each migration once.
const migrationLock = 0x746f6f6c6c656467 // "toolledg"

// migrations are the schema's versions, in order: version i+1 is
// migrations[i]. A released migration is never edited; a change is a new
// one.
var migrations = []string{
	// 1: the records, and the key check's index.
	`CREATE TABLE toolledger_records (
	uid text PRIMARY KEY,
	namespace text NOT NULL,
	key text NOT NULL,
	tool_kind text NOT NULL,
	tool_name text NOT NULL,
	idempotency_class text NOT NULL,
	request_digest text NOT NULL,
	phase text NOT NULL,
	error_class text NOT NULL,
	error_reason text NOT NULL,
	external_ref text NOT NULL,
	attempts integer NOT NULL,
	guards_key boolean NOT NULL,
	completion_time timestamptz NOT NULL,
	cause text NOT NULL,
	deleted_by text NOT NULL,
	deletion_time timestamptz NOT NULL,
	archived_at timestamptz NOT NULL DEFAULT now(),
	action jsonb NOT NULL
);
CREATE INDEX toolledger_records_by_key ON toolledger_records (namespace, key, completion_time DESC);`,
	// 2: the archive API's listing order, and pruning by tool. No index
	// is dropped: DROP INDEX would lock the table against the key check
	// while a large archive builds the new ones.
	`CREATE INDEX toolledger_records_in_order ON toolledger_records (namespace, key, completion_time, uid);
CREATE INDEX toolledger_records_by_tool ON toolledger_records (tool_kind, tool_name, namespace, completion_time);`,
}

// SchemaVersion is the schema version this build migrates to.
func SchemaVersion() int { return len(migrations) }

// migrate brings the schema to SchemaVersion in one transaction, under the
// migration lock. A database already newer than this build is refused: an
// older manager must not write to a schema it does not know. A schema
// already at this version is only read, so that a role that may read the
// migrations and read and insert records, and nothing more, can start.
func (s *Store) migrate(ctx context.Context) error {
	current, err := s.version(ctx)
	switch {
	case err != nil:
		return err
	case current == len(migrations):
		return nil
	case current > len(migrations):
		return newerSchema(current)
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrationLock)); err != nil {
			return fmt.Errorf("cannot take the archive's migration lock: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS toolledger_schema_migrations (
	version integer PRIMARY KEY,
	applied_at timestamptz NOT NULL DEFAULT now()
)`); err != nil {
			return fmt.Errorf("cannot create the archive's migration table: %w", err)
		}
		var current int
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM toolledger_schema_migrations`).Scan(&current); err != nil {
			return fmt.Errorf("cannot read the archive's schema version: %w", err)
		}
		if current > len(migrations) {
			return newerSchema(current)
		}
		for v := current + 1; v <= len(migrations); v++ {
			if _, err := tx.Exec(ctx, migrations[v-1]); err != nil {
				return fmt.Errorf("cannot migrate the archive to schema version %d: %w", v, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO toolledger_schema_migrations (version) VALUES ($1)`, v); err != nil {
				return fmt.Errorf("cannot record the archive's schema version %d: %w", v, err)
			}
		}
		return nil
	})
}

// version is the schema's version, read without taking the lock or making
// any table; 0 before the first migration.
func (s *Store) version(ctx context.Context) (int, error) {
	var migrated bool
	if err := s.pool.QueryRow(ctx, `SELECT to_regclass('toolledger_schema_migrations') IS NOT NULL`).Scan(&migrated); err != nil {
		return 0, fmt.Errorf("cannot read the archive's schema version: %w", err)
	}
	if !migrated {
		return 0, nil
	}
	var current int
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM toolledger_schema_migrations`).Scan(&current); err != nil {
		return 0, fmt.Errorf("cannot read the archive's schema version: %w", err)
	}
	return current, nil
}

func newerSchema(current int) error {
	return fmt.Errorf("the archive's schema is at version %d, newer than this manager's %d: upgrade the manager", current, len(migrations))
}
