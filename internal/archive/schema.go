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
	// 3: each namespace's history as a hash chain (chain.go), whose newest
	// link toolledger_chain_heads keeps apart from the records, from the
	// time the chain started. Rows archived before stay outside it
	// (chain_seq NULL). Pruning goes through toolledger_prune, which runs
	// as the schema's owner, so that the manager's role needs no DELETE;
	// it logs each prune and leaves the pruned records' links in
	// toolledger_chain_pruned, runs of consecutive ones merged, for the
	// chain to continue through. The functions resolve names in this
	// schema only, then pg_temp: a caller's temporary table cannot stand
	// in for one of them.
	`ALTER TABLE toolledger_records
	ADD COLUMN chain_seq bigint,
	ADD COLUMN chain_prev text,
	ADD COLUMN chain_hash text;
CREATE TABLE toolledger_chain_heads (
	namespace text PRIMARY KEY,
	seq bigint NOT NULL,
	hash text NOT NULL,
	started_at timestamptz NOT NULL DEFAULT now(),
	updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE toolledger_chain_pruned (
	namespace text NOT NULL,
	first_seq bigint NOT NULL,
	last_seq bigint NOT NULL,
	first_prev text NOT NULL,
	last_hash text NOT NULL,
	pruned_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (namespace, first_seq)
);
CREATE UNIQUE INDEX toolledger_chain_pruned_by_last ON toolledger_chain_pruned (namespace, last_seq);
CREATE TABLE toolledger_prune_log (
	pruned_at timestamptz NOT NULL DEFAULT now(),
	pruned_by text NOT NULL,
	tool_kind text NOT NULL,
	namespace text NOT NULL,
	tool_name text NOT NULL,
	completed_before timestamptz NOT NULL,
	records bigint NOT NULL
);
SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_temp', true);
CREATE FUNCTION toolledger_chain_note_pruned(p_namespace text, p_seq bigint, p_prev text, p_hash text) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
	before_run toolledger_chain_pruned%ROWTYPE;
	after_run toolledger_chain_pruned%ROWTYPE;
BEGIN
	SELECT * INTO before_run FROM toolledger_chain_pruned WHERE namespace = p_namespace AND last_seq = p_seq - 1;
	SELECT * INTO after_run FROM toolledger_chain_pruned WHERE namespace = p_namespace AND first_seq = p_seq + 1;
	IF before_run.namespace IS NOT NULL AND after_run.namespace IS NOT NULL THEN
		DELETE FROM toolledger_chain_pruned WHERE namespace = p_namespace AND first_seq = after_run.first_seq;
		UPDATE toolledger_chain_pruned SET last_seq = after_run.last_seq, last_hash = after_run.last_hash, pruned_at = now()
		WHERE namespace = p_namespace AND first_seq = before_run.first_seq;
	ELSIF before_run.namespace IS NOT NULL THEN
		UPDATE toolledger_chain_pruned SET last_seq = p_seq, last_hash = p_hash, pruned_at = now()
		WHERE namespace = p_namespace AND first_seq = before_run.first_seq;
	ELSIF after_run.namespace IS NOT NULL THEN
		UPDATE toolledger_chain_pruned SET first_seq = p_seq, first_prev = p_prev, pruned_at = now()
		WHERE namespace = p_namespace AND first_seq = after_run.first_seq;
	ELSE
		INSERT INTO toolledger_chain_pruned (namespace, first_seq, last_seq, first_prev, last_hash)
		VALUES (p_namespace, p_seq, p_seq, p_prev, p_hash);
	END IF;
END $$;
CREATE FUNCTION toolledger_prune(p_kind text, p_namespace text, p_name text, p_before timestamptz, p_limit integer) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
	r record;
	pruned bigint := 0;
BEGIN
	FOR r IN DELETE FROM toolledger_records WHERE uid IN (
		SELECT uid FROM toolledger_records
		WHERE tool_kind = p_kind AND tool_name = p_name AND (p_namespace = '' OR namespace = p_namespace) AND completion_time < p_before
		LIMIT p_limit)
	RETURNING namespace, chain_seq, chain_prev, chain_hash
	LOOP
		pruned := pruned + 1;
		IF r.chain_seq IS NOT NULL THEN
			PERFORM toolledger_chain_note_pruned(r.namespace, r.chain_seq, r.chain_prev, r.chain_hash);
		END IF;
	END LOOP;
	IF pruned > 0 THEN
		INSERT INTO toolledger_prune_log (pruned_by, tool_kind, namespace, tool_name, completed_before, records)
		VALUES (session_user, p_kind, p_namespace, p_name, p_before, pruned);
	END IF;
	RETURN pruned;
END $$;
REVOKE EXECUTE ON FUNCTION toolledger_chain_note_pruned(text, bigint, text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION toolledger_prune(text, text, text, timestamptz, integer) FROM PUBLIC;`,
	// 4: the chain's order, apart from migration 3, so that its build holds
	// only inserts (a SHARE lock), not the key check's reads.
	`CREATE UNIQUE INDEX toolledger_records_chain ON toolledger_records (namespace, chain_seq);`,
	// 5: the archive's identity, which the cluster records as the one the
	// ledger keeps its keys in (internal/archivebinding), and when it was
	// decommissioned: from then on no record is kept here, and its keys
	// were written back as Tombstones.
	`CREATE TABLE toolledger_archive (
	singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
	identity uuid NOT NULL DEFAULT gen_random_uuid(),
	created_at timestamptz NOT NULL DEFAULT now(),
	decommissioned_at timestamptz
);
INSERT INTO toolledger_archive DEFAULT VALUES;`,
	// 6: a namespace's records bound to its uid, so that a namespace
	// created again under the name starts a new history
	// (toolledger_namespaces lists each namespace of a name the archive
	// holds records of; '' stands for the records archived before), and an
	// append guarded by the database itself: a trigger, as the schema's
	// owner, takes only the next link of the namespace's chain, archived at
	// the transaction's time with the namespace's uid, and moves the head,
	// so that the manager's role may insert links and nothing else. Rows
	// moved from Tombstones are pruned by their Tool's own keyRetention
	// (toolledger_prune_tool); those of a namespace deleted since, by the
	// history retention alone (toolledger_prune_namespace).
	`ALTER TABLE toolledger_records ADD COLUMN namespace_uid text;
CREATE TABLE toolledger_namespaces (
	namespace text NOT NULL,
	namespace_uid text NOT NULL,
	first_archived_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (namespace, namespace_uid)
);
INSERT INTO toolledger_namespaces (namespace, namespace_uid) SELECT DISTINCT namespace, '' FROM toolledger_records;
SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_temp', true);
CREATE FUNCTION toolledger_records_append() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
	head toolledger_chain_heads%ROWTYPE;
BEGIN
	IF NEW.chain_seq IS NULL OR NEW.chain_hash IS NULL OR coalesce(NEW.namespace_uid, '') = '' THEN
		RAISE EXCEPTION 'record % of namespace % is not a link of its namespace''s chain with its namespace''s uid', NEW.key, NEW.namespace
			USING ERRCODE = 'check_violation';
	END IF;
	IF NEW.archived_at IS DISTINCT FROM now() THEN
		RAISE EXCEPTION 'record % of namespace % is archived at %, not at the time of its transaction', NEW.key, NEW.namespace, NEW.archived_at
			USING ERRCODE = 'check_violation';
	END IF;
	SELECT * INTO head FROM toolledger_chain_heads WHERE namespace = NEW.namespace FOR UPDATE;
	IF NEW.chain_seq <> coalesce(head.seq, 0) + 1 OR coalesce(NEW.chain_prev, '') <> coalesce(head.hash, '') THEN
		RAISE EXCEPTION 'record % of namespace % does not follow its chain''s head, record %', NEW.key, NEW.namespace, coalesce(head.seq, 0)
			USING ERRCODE = 'check_violation';
	END IF;
	INSERT INTO toolledger_chain_heads (namespace, seq, hash) VALUES (NEW.namespace, NEW.chain_seq, NEW.chain_hash)
	ON CONFLICT (namespace) DO UPDATE SET seq = excluded.seq, hash = excluded.hash, updated_at = now();
	INSERT INTO toolledger_namespaces (namespace, namespace_uid) VALUES (NEW.namespace, NEW.namespace_uid) ON CONFLICT DO NOTHING;
	RETURN NEW;
END $$;
CREATE TRIGGER toolledger_records_append BEFORE INSERT ON toolledger_records FOR EACH ROW EXECUTE FUNCTION toolledger_records_append();
CREATE FUNCTION toolledger_prune_tool(p_kind text, p_namespace text, p_name text, p_before timestamptz, p_tombstones_before timestamptz,
	p_limit integer) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
	r record;
	pruned bigint := 0;
BEGIN
	FOR r IN DELETE FROM toolledger_records WHERE uid IN (
		SELECT uid FROM toolledger_records
		WHERE tool_kind = p_kind AND tool_name = p_name AND (p_namespace = '' OR namespace = p_namespace)
			AND completion_time < CASE WHEN coalesce(action->>'kind', '') = 'Tombstone' THEN p_tombstones_before ELSE p_before END
		LIMIT p_limit)
	RETURNING namespace, chain_seq, chain_prev, chain_hash
	LOOP
		pruned := pruned + 1;
		IF r.chain_seq IS NOT NULL THEN
			PERFORM toolledger_chain_note_pruned(r.namespace, r.chain_seq, r.chain_prev, r.chain_hash);
		END IF;
	END LOOP;
	IF pruned > 0 THEN
		INSERT INTO toolledger_prune_log (pruned_by, tool_kind, namespace, tool_name, completed_before, records)
		VALUES (session_user, p_kind, p_namespace, p_name, p_before, pruned);
	END IF;
	RETURN pruned;
END $$;
CREATE FUNCTION toolledger_prune_namespace(p_namespace text, p_namespace_uid text, p_created_before timestamptz, p_before timestamptz,
	p_limit integer) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
	r record;
	pruned bigint := 0;
BEGIN
	FOR r IN DELETE FROM toolledger_records WHERE uid IN (
		SELECT uid FROM toolledger_records
		WHERE namespace = p_namespace AND archived_at < p_before AND CASE WHEN p_namespace_uid = ''
			THEN namespace_uid IS NULL AND (action->'metadata'->>'creationTimestamp')::timestamptz < p_created_before
			ELSE namespace_uid = p_namespace_uid END
		LIMIT p_limit)
	RETURNING namespace, chain_seq, chain_prev, chain_hash
	LOOP
		pruned := pruned + 1;
		IF r.chain_seq IS NOT NULL THEN
			PERFORM toolledger_chain_note_pruned(r.namespace, r.chain_seq, r.chain_prev, r.chain_hash);
		END IF;
	END LOOP;
	IF pruned > 0 THEN
		INSERT INTO toolledger_prune_log (pruned_by, tool_kind, namespace, tool_name, completed_before, records)
		VALUES (session_user, 'Namespace', p_namespace, p_namespace_uid, p_before, pruned);
	END IF;
	IF pruned < p_limit AND NOT EXISTS (SELECT 1 FROM toolledger_records WHERE namespace = p_namespace AND CASE WHEN p_namespace_uid = ''
			THEN namespace_uid IS NULL ELSE namespace_uid = p_namespace_uid END) THEN
		DELETE FROM toolledger_namespaces WHERE namespace = p_namespace AND namespace_uid = p_namespace_uid;
	END IF;
	RETURN pruned;
END $$;
REVOKE EXECUTE ON FUNCTION toolledger_records_append() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION toolledger_prune_tool(text, text, text, timestamptz, timestamptz, integer) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION toolledger_prune_namespace(text, text, timestamptz, timestamptz, integer) FROM PUBLIC;`,
	// 7: the history filters that the archive API selects by and no other
	// index serves, each in a namespace and in the list's order, so that a
	// search reads the records it returns rather than the namespace's
	// every record. Built as the earlier ones: inserts wait, reads and the
	// key check do not.
	`CREATE INDEX toolledger_records_by_requester ON toolledger_records
	(namespace, (action->'metadata'->'annotations'->>'toolledger.dev/requested-by'), key, completion_time, uid);
CREATE INDEX toolledger_records_by_approver ON toolledger_records
	(namespace, (action->'status'->'approval'->>'decidedBy'), key, completion_time, uid);
CREATE INDEX toolledger_records_by_external_ref ON toolledger_records (namespace, external_ref, key, completion_time, uid);`,
	// 8: a record whose answers stated a keptUntil (its document's
	// status.keptUntil, or record.keptUntil for a moved Tombstone) is not
	// pruned before that date and the history retention have passed,
	// whatever the tool's keyRetention says now. A value that is no RFC
	// 3339 time, which the API server would not have stored, is never
	// cast, so that one row cannot stop the pruning: such a row stays.
	`DROP FUNCTION toolledger_prune_tool(text, text, text, timestamptz, timestamptz, integer);
SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_temp', true);
CREATE FUNCTION toolledger_prune_tool(p_kind text, p_namespace text, p_name text, p_before timestamptz, p_tombstones_before timestamptz,
	p_kept_before timestamptz, p_limit integer) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
	r record;
	pruned bigint := 0;
BEGIN
	FOR r IN DELETE FROM toolledger_records WHERE uid IN (
		SELECT uid FROM toolledger_records, LATERAL (SELECT coalesce(action->'status'->>'keptUntil', action->'record'->>'keptUntil') AS kept_until) stated
		WHERE tool_kind = p_kind AND tool_name = p_name AND (p_namespace = '' OR namespace = p_namespace)
			AND completion_time < CASE WHEN coalesce(action->>'kind', '') = 'Tombstone' THEN p_tombstones_before ELSE p_before END
			AND CASE WHEN stated.kept_until IS NULL THEN true
				WHEN stated.kept_until ~ '^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$' THEN stated.kept_until::timestamptz < p_kept_before
				ELSE false END
		LIMIT p_limit)
	RETURNING namespace, chain_seq, chain_prev, chain_hash
	LOOP
		pruned := pruned + 1;
		IF r.chain_seq IS NOT NULL THEN
			PERFORM toolledger_chain_note_pruned(r.namespace, r.chain_seq, r.chain_prev, r.chain_hash);
		END IF;
	END LOOP;
	IF pruned > 0 THEN
		INSERT INTO toolledger_prune_log (pruned_by, tool_kind, namespace, tool_name, completed_before, records)
		VALUES (session_user, p_kind, p_namespace, p_name, p_before, pruned);
	END IF;
	RETURN pruned;
END $$;
REVOKE EXECUTE ON FUNCTION toolledger_prune_tool(text, text, text, timestamptz, timestamptz, timestamptz, integer) FROM PUBLIC;`,
	// 9: the records of a namespace's earlier life that no decision freed
	// (its name is gone, or taken again by a namespace that has not
	// adopted nor released that life) keep their keys for their retention
	// before the history retention prunes them: a namespace restored from
	// a backup after that long finds them still. Those of a life released
	// go once the history retention passed since they were archived, as
	// before. p_keys_before bounds a record's completion (the longest key
	// retention of the tools, as a tool since lengthened keeps it), and
	// p_kept_before the keptUntil it stated, if any.
	`DROP FUNCTION toolledger_prune_namespace(text, text, timestamptz, timestamptz, integer);
SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_temp', true);
CREATE FUNCTION toolledger_prune_namespace(p_namespace text, p_namespace_uid text, p_created_before timestamptz, p_before timestamptz,
	p_keys_before timestamptz, p_kept_before timestamptz, p_limit integer) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
	r record;
	pruned bigint := 0;
BEGIN
	FOR r IN DELETE FROM toolledger_records WHERE uid IN (
		SELECT uid FROM toolledger_records, LATERAL (SELECT coalesce(action->'status'->>'keptUntil', action->'record'->>'keptUntil') AS kept_until) stated
		WHERE namespace = p_namespace AND archived_at < p_before AND CASE WHEN p_namespace_uid = ''
			THEN namespace_uid IS NULL AND (action->'metadata'->>'creationTimestamp')::timestamptz < p_created_before
			ELSE namespace_uid = p_namespace_uid END
			AND completion_time < p_keys_before
			AND CASE WHEN stated.kept_until IS NULL THEN true
				WHEN stated.kept_until ~ '^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$' THEN stated.kept_until::timestamptz < p_kept_before
				ELSE false END
		LIMIT p_limit)
	RETURNING namespace, chain_seq, chain_prev, chain_hash
	LOOP
		pruned := pruned + 1;
		IF r.chain_seq IS NOT NULL THEN
			PERFORM toolledger_chain_note_pruned(r.namespace, r.chain_seq, r.chain_prev, r.chain_hash);
		END IF;
	END LOOP;
	IF pruned > 0 THEN
		INSERT INTO toolledger_prune_log (pruned_by, tool_kind, namespace, tool_name, completed_before, records)
		VALUES (session_user, 'Namespace', p_namespace, p_namespace_uid, p_before, pruned);
	END IF;
	IF pruned < p_limit AND NOT EXISTS (SELECT 1 FROM toolledger_records WHERE namespace = p_namespace AND CASE WHEN p_namespace_uid = ''
			THEN namespace_uid IS NULL ELSE namespace_uid = p_namespace_uid END) THEN
		DELETE FROM toolledger_namespaces WHERE namespace = p_namespace AND namespace_uid = p_namespace_uid;
	END IF;
	RETURN pruned;
END $$;
REVOKE EXECUTE ON FUNCTION toolledger_prune_namespace(text, text, timestamptz, timestamptz, timestamptz, timestamptz, integer) FROM PUBLIC;`,
}

// SchemaVersion is the schema version this build migrates to.
func SchemaVersion() int { return len(migrations) }

// migrate brings the schema to SchemaVersion, each migration in a
// transaction of its own under the migration lock, so that one that builds
// an index does not hold what an earlier one locked. A database already
// newer than this build is refused: an older manager must not write to a
// schema it does not know. A schema already at this version is only read,
// so that a role that may read and insert records, and nothing more, can
// start.
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
	// Read from the statement's snapshot alone: another replica may be
	// creating the table right now, and a catalog lookup such as
	// to_regclass can see it before the snapshot's pg_tables does. A table
	// not in the snapshot is one this role must be able to create.
	var owner bool
	if err := s.keys.QueryRow(ctx, `SELECT COALESCE(
	(SELECT pg_has_role(current_user, tableowner, 'MEMBER') FROM pg_tables WHERE schemaname = current_schema() AND tablename = 'toolledger_records'),
	has_schema_privilege(current_schema(), 'CREATE'))`).Scan(&owner); err != nil {
		return fmt.Errorf("cannot read whether the archive's role may migrate its schema: %w", err)
	}
	if !owner {
		return fmt.Errorf("the archive's schema is at version %d and this manager needs %d, which its database role cannot migrate: "+
			"run `manager migrate-archive` with the schema owner's DSN first (the chart's archive migration Job does; docs/audit.md, \"The database's roles\")",
			current, len(migrations))
	}
	for {
		done, err := s.migrateOnce(ctx)
		if done || err != nil {
			return err
		}
	}
}

// migrateOnce applies the next migration, unless another replica did:
// done once the schema is at this build's version.
func (s *Store) migrateOnce(ctx context.Context) (done bool, err error) {
	err = pgx.BeginFunc(ctx, s.keys, func(tx pgx.Tx) error {
		// A migration may build an index over a large archive: it takes
		// what it takes.
		if _, err := tx.Exec(ctx, `SET LOCAL statement_timeout = 0`); err != nil {
			return fmt.Errorf("cannot lift the statement timeout for a migration: %w", err)
		}
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
		switch {
		case current > len(migrations):
			return newerSchema(current)
		case current == len(migrations):
			done = true
			return nil
		}
		v := current + 1
		if _, err := tx.Exec(ctx, migrations[v-1]); err != nil {
			return fmt.Errorf("cannot migrate the archive to schema version %d: %w", v, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO toolledger_schema_migrations (version) VALUES ($1)`, v); err != nil {
			return fmt.Errorf("cannot record the archive's schema version %d: %w", v, err)
		}
		return nil
	})
	return done, err
}

// version is the schema's version, read without taking the lock or making
// any table; 0 before the first migration.
func (s *Store) version(ctx context.Context) (int, error) {
	var migrated bool
	if err := s.keys.QueryRow(ctx, `SELECT to_regclass('toolledger_schema_migrations') IS NOT NULL`).Scan(&migrated); err != nil {
		return 0, fmt.Errorf("cannot read the archive's schema version: %w", err)
	}
	if !migrated {
		return 0, nil
	}
	var current int
	if err := s.keys.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM toolledger_schema_migrations`).Scan(&current); err != nil {
		return 0, fmt.Errorf("cannot read the archive's schema version: %w", err)
	}
	return current, nil
}

func newerSchema(current int) error {
	return fmt.Errorf("the archive's schema is at version %d, newer than this manager's %d: upgrade the manager", current, len(migrations))
}

// runtimeFunctions are the functions the manager's role calls: pruning, as
// the schema's owner.
var runtimeFunctions = []string{
	"toolledger_prune_tool(text, text, text, timestamptz, timestamptz, timestamptz, integer)",
	"toolledger_prune_namespace(text, text, timestamptz, timestamptz, timestamptz, timestamptz, integer)",
}

// Migrate brings the schema of the archive at dsn, whose role owns it, to
// this build's version, and grants role (when not empty) what a manager
// needs and nothing more: to read the schema, insert records and read
// them, and prune through the functions that run as the owner.
func Migrate(ctx context.Context, dsn, role string) error {
	s, err := Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer s.Close()
	if role == "" {
		return nil
	}
	var schema string
	if err := s.keys.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return fmt.Errorf("cannot read the archive's schema: %w", err)
	}
	grantee := pgx.Identifier{role}.Sanitize()
	grants := []string{`GRANT USAGE ON SCHEMA ` + pgx.Identifier{schema}.Sanitize() + ` TO ` + grantee,
		`GRANT SELECT ON toolledger_schema_migrations TO ` + grantee}
	for _, p := range privileges {
		grants = append(grants, `GRANT `+p.privilege+` ON `+p.table+` TO `+grantee)
	}
	for _, f := range runtimeFunctions {
		grants = append(grants, `GRANT EXECUTE ON FUNCTION `+f+` TO `+grantee)
	}
	return pgx.BeginFunc(ctx, s.keys, func(tx pgx.Tx) error {
		for _, grant := range grants {
			if _, err := tx.Exec(ctx, grant); err != nil {
				return fmt.Errorf("cannot grant the manager's role %s what it needs (%s): %w", role, grant, err)
			}
		}
		return nil
	})
}
