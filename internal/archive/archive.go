// Package archive keeps the ledger's history outside the control plane:
// finished ToolAction records, and the keys they guard, in PostgreSQL. etcd
// keeps the live actions and the recently finished; a record leaves it only
// once its row here is committed, and a new action's key is checked here
// before its first dispatch.
//
// The schema keeps to what PostgreSQL and the engines that speak its wire
// protocol share: plain tables, b-tree indexes, INSERT … ON CONFLICT, and
// one advisory lock around migrations.
package archive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/history"
)

// Store is the archive in one PostgreSQL database, shared by every replica.
type Store struct {
	// keys checks keys and keeps and prunes records: what every tenant's
	// new and finished actions wait for. reads serves people's reads (the
	// archive API's gets and lists, verifications), so that a flood of
	// them never takes the key check's connections.
	keys, reads *pgxpool.Pool
	// identity names the database's archive, as the cluster records it.
	identity string
	// ownsSchema is whether the store's role owns the schema, as it does
	// when the manager migrates the schema itself.
	ownsSchema bool
	// sync notes the keeps whose wait for synchronous standbys was cut
	// short; requireStandby refuses to keep on a server whose commits wait
	// for none.
	sync           syncWaits
	requireStandby bool
}

// Option changes how a Store keeps records.
type Option func(*Store)

// RequireSynchronousStandby has Keep refuse (ErrNotDurable) while the
// server's commits wait for no standby: records then stay in etcd rather
// than live on one server alone.
func RequireSynchronousStandby() Option { return func(s *Store) { s.requireStandby = true } }

const (
	// readConnections bounds the connections people's reads take, beside
	// the key check's pool (the DSN's pool_max_conns, else pgxpool's
	// default: 4, or the CPUs when more).
	readConnections = 4
	// keyStatementTimeout bounds each statement of the key check, a keep
	// or a prune: a statement held longer (a lock, a stalled server) fails,
	// and its action is retried, ArchiveUnavailable. Migrations have none.
	keyStatementTimeout = 10 * time.Second
	// readStatementTimeout bounds each statement of a person's read.
	readStatementTimeout = 30 * time.Second
	// keyCheckTimeout bounds a whole key check, the wait for a connection
	// included, so that a worker is never held by the archive.
	keyCheckTimeout = 5 * time.Second
	// keepTimeout bounds a whole keep, its commit's wait for the
	// synchronous standbys included, which no statement timeout bounds (a
	// cancelled wait commits on the server alone): a standby that does not
	// answer leaves the record in etcd, kept later. The keep's connection is
	// closed then, which ends its session's wait and lets the namespace's
	// chain lock go.
	keepTimeout = 30 * time.Second
)

// Open connects to the database at dsn (a PostgreSQL URL or key=value
// string) and migrates its schema to this version's.
func Open(ctx context.Context, dsn string, opts ...Option) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("invalid archive DSN: %w", err)
	}
	s := &Store{}
	for _, opt := range opts {
		opt(s)
	}
	keyConfig := withStatementTimeout(cfg, keyStatementTimeout)
	keyConfig.ConnConfig.OnNotice = s.sync.onNotice
	keys, err := pgxpool.NewWithConfig(ctx, keyConfig)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to the archive: %w", err)
	}
	readConfig := withStatementTimeout(cfg, readStatementTimeout)
	readConfig.MaxConns, readConfig.MinConns = readConnections, 0
	reads, err := pgxpool.NewWithConfig(ctx, readConfig)
	if err != nil {
		keys.Close()
		return nil, fmt.Errorf("cannot connect to the archive: %w", err)
	}
	s.keys, s.reads = keys, reads
	err = s.migrate(ctx)
	if err == nil {
		err = s.checkPrivileges(ctx)
	}
	if err == nil {
		err = s.readIdentity(ctx)
	}
	if err == nil {
		err = s.keys.QueryRow(ctx, `SELECT pg_has_role(current_user, tableowner, 'MEMBER') FROM pg_tables
WHERE schemaname = current_schema() AND tablename = 'toolledger_records'`).Scan(&s.ownsSchema)
	}
	if err != nil {
		s.Close()
		observe("ping", err)
		return nil, err
	}
	observe("ping", nil)
	return s, nil
}

// readIdentity reads the archive's identity, made by its first migration.
func (s *Store) readIdentity(ctx context.Context) error {
	if err := s.keys.QueryRow(ctx, `SELECT identity::text FROM toolledger_archive`).Scan(&s.identity); err != nil {
		return fmt.Errorf("cannot read the archive's identity: %w", err)
	}
	return nil
}

// Identity names this archive: the same for every replica and every
// connection to its database, another for another database.
func (s *Store) Identity() string { return s.identity }

// OwnsSchema reports whether the store's role owns the archive's schema,
// and so could drop its trigger and rewrite records: the chain's evidence
// against such a role rests on the cluster's checkpoints alone.
func (s *Store) OwnsSchema() bool { return s.ownsSchema }

// withStatementTimeout is a copy of cfg whose sessions cancel a statement
// that runs longer than timeout.
func withStatementTimeout(cfg *pgxpool.Config, timeout time.Duration) *pgxpool.Config {
	c := cfg.Copy()
	c.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(timeout.Milliseconds(), 10)
	return c
}

// privileges are what the manager's role needs on the tables: to check
// keys, keep records on their chain (the schema's trigger moves the head)
// and verify it. Pruning needs EXECUTE on toolledger_prune_tool and
// toolledger_prune_namespace besides, checked when it runs.
var privileges = []struct{ table, privilege string }{
	{"toolledger_records", "SELECT"}, {"toolledger_records", "INSERT"},
	{"toolledger_chain_heads", "SELECT"},
	{"toolledger_chain_pruned", "SELECT"},
	{"toolledger_archive", "SELECT"},
	{"toolledger_namespaces", "SELECT"},
}

// checkPrivileges refuses to start with a role that could not keep a
// record, which would hold every finished record in etcd: a role granted
// for an older schema, say.
func (s *Store) checkPrivileges(ctx context.Context) error {
	var missing []string
	for _, p := range privileges {
		var held bool
		if err := s.keys.QueryRow(ctx, `SELECT has_table_privilege($1, $2)`, p.table, p.privilege).Scan(&held); err != nil {
			return fmt.Errorf("cannot read the archive role's privileges: %w", err)
		}
		if !held {
			missing = append(missing, p.privilege+" on "+p.table)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the archive's database role lacks %s: grant them (docs/audit.md, \"The database's roles\")", strings.Join(missing, ", "))
	}
	return nil
}

// Close closes the store's connections.
func (s *Store) Close() {
	s.keys.Close()
	s.reads.Close()
}

// ErrUnavailable wraps every failure to use the archive: the database
// cannot be reached, or refused the statement.
var ErrUnavailable = errors.New("the archive cannot be used")

// ErrDecommissioned is Keep's answer once the archive was decommissioned:
// the record's key must be kept elsewhere (a Tombstone).
var ErrDecommissioned = errors.New("the archive was decommissioned: it keeps no more records")

// Ping reports whether the database answers.
func (s *Store) Ping(ctx context.Context) error {
	err := s.keys.Ping(ctx)
	observe("ping", err)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

// Record is what the archive keeps of a finished action: the columns an
// auditor and the key check query, and the action itself (its spec, with
// the parameters that enter the digest, and its status; never anything
// read from a Secret, which the action does not hold).
type Record struct {
	UID       types.UID
	Namespace string
	// NamespaceUID is the uid of the namespace the record was archived
	// from: a namespace created again under the name has another, and
	// starts a new history. Empty for a record archived before the archive
	// told them apart.
	NamespaceUID types.UID
	// Key is the action's name: its idempotency key.
	Key              string
	Tool             v1alpha1.ToolReference
	IdempotencyClass v1alpha1.IdempotencyClass
	RequestDigest    string
	Phase            v1alpha1.Phase
	ErrorClass       v1alpha1.ErrorClass
	ErrorReason      string
	ExternalRef      string
	Attempts         int32
	// GuardsKey is whether the record may have caused an effect (it was
	// dispatched), so that its key answers from it.
	GuardsKey      bool
	CompletionTime time.Time
	// KeptUntil is the action's status.keptUntil, read from its document:
	// the key is not freed before it. Nil when the action stated none.
	KeptUntil *metav1.Time
	// Cause is why the record left etcd (v1alpha1.TombstoneCause*);
	// DeletedBy who deleted it, when the manager did.
	Cause     string
	DeletedBy string
	// DeletionTime is when the record left etcd, or was asked to.
	DeletionTime time.Time
	// Action is the ToolAction as it was retired, in JSON.
	Action json.RawMessage
	// Chain is the record's link in its namespace's chain, once archived;
	// zero for a record archived before the archive had chains.
	Chain Link
	// ArchivedAt is when the record was archived: the time of the
	// transaction that kept it.
	ArchivedAt time.Time
	// FromTombstone is whether the record was moved from a Tombstone
	// written before the archive: its key keeps the Tombstone's retention,
	// its Tool's own keyRetention, not the archive's default.
	FromTombstone bool
	// Omitted names what Action leaves out (OmittedParameters,
	// OmittedLastApplied): a list's records leave them out; Read serves them.
	Omitted []string
}

// What a list's records leave out of their action, in the database, so
// that a list of large records ships and holds only their summaries: the
// parameters, which may be one string of any size, and kubectl's copy of
// them in the last-applied-configuration annotation.
const (
	OmittedParameters  = "spec.parameters"
	OmittedLastApplied = "metadata.annotations." + corev1.LastAppliedConfigAnnotation
)

// Namespace is one life of a namespace: its name, the uid the API server
// gave it, which a namespace created again under the name does not share,
// and when it was created.
type Namespace struct {
	Name    string
	UID     types.UID
	Created time.Time
}

// NewRecord is the archive's record of a finished action of the namespace
// whose uid is namespaceUID, which leaves etcd for cause; tool is the
// action's tool when it could be read.
func NewRecord(a *v1alpha1.ToolAction, namespaceUID types.UID, tool *v1alpha1.Tool, cause, deletedBy string, deleted time.Time) (Record, error) {
	if a.Status.CompletionTime == nil {
		return Record{}, fmt.Errorf("ToolAction %s/%s has not finished: it cannot be archived", a.Namespace, a.Name)
	}
	kept := a.DeepCopy()
	kept.ManagedFields = nil
	action, err := json.Marshal(kept)
	if err != nil {
		return Record{}, fmt.Errorf("cannot encode ToolAction %s/%s: %w", a.Namespace, a.Name, err)
	}
	r := Record{
		UID: a.UID, Namespace: a.Namespace, NamespaceUID: namespaceUID, Key: a.Name,
		Tool:          v1alpha1.ToolReference{Kind: a.Spec.ToolRef.KindOrDefault(), Name: a.Spec.ToolRef.Name},
		RequestDigest: a.Status.RequestDigest, Phase: a.Status.Phase, ExternalRef: a.Status.ExternalRef,
		Attempts: a.Status.Attempts, GuardsKey: a.Status.Attempts > 0,
		CompletionTime: a.Status.CompletionTime.Time, Cause: cause, DeletedBy: deletedBy, DeletionTime: deleted,
		Action: action, KeptUntil: a.Status.KeptUntil,
	}
	if tool != nil {
		r.IdempotencyClass = tool.Spec.IdempotencyClass
	}
	if e := a.Status.Error; e != nil {
		r.ErrorClass, r.ErrorReason = e.Class, e.Reason
	}
	return r, nil
}

// RecordFromTombstone is the archive's record of a key kept by a Tombstone
// written before the manager had an archive, in the namespace whose uid is
// namespaceUID. Its document is the Tombstone, the only record of the
// action left.
func RecordFromTombstone(tomb *v1alpha1.Tombstone, namespaceUID types.UID) (Record, error) {
	kept := tomb.DeepCopy()
	kept.ManagedFields = nil
	kept.TypeMeta = metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Tombstone"}
	doc, err := json.Marshal(kept)
	if err != nil {
		return Record{}, fmt.Errorf("cannot encode Tombstone %s/%s: %w", tomb.Namespace, tomb.Name, err)
	}
	t := tomb.Record
	return Record{
		UID: t.ActionUID, Namespace: tomb.Namespace, NamespaceUID: namespaceUID, Key: tomb.Name, IdempotencyClass: t.IdempotencyClass,
		Tool:          v1alpha1.ToolReference{Kind: t.ToolRef.KindOrDefault(), Name: t.ToolRef.Name},
		RequestDigest: t.RequestDigest, Phase: t.Phase, ErrorClass: t.ErrorClass, ErrorReason: t.ErrorReason,
		ExternalRef: t.ExternalRef, Attempts: t.Attempts, GuardsKey: true, CompletionTime: t.CompletionTime.Time,
		Cause: t.Cause, DeletedBy: t.DeletedBy, DeletionTime: t.DeletionTime.Time, Action: doc, FromTombstone: true,
		KeptUntil: t.KeptUntil,
	}, nil
}

// Result is the result the archived action stored of the downstream's
// answer (status.result); nil for none, and for a record moved from a
// Tombstone, which keeps none.
func (r *Record) Result() json.RawMessage {
	var doc struct {
		Status struct {
			Result json.RawMessage `json:"result"`
		} `json:"status"`
	}
	if r.FromTombstone || json.Unmarshal(r.Action, &doc) != nil {
		return nil
	}
	return doc.Status.Result
}

// Tombstone is the record as the key check reads it: what a Tombstone
// would hold.
func (r *Record) Tombstone() v1alpha1.TombstoneRecord {
	return v1alpha1.TombstoneRecord{
		ActionUID: r.UID, RequestDigest: r.RequestDigest, Phase: r.Phase, ExternalRef: r.ExternalRef,
		Attempts: r.Attempts, CompletionTime: metav1.NewTime(r.CompletionTime), ToolRef: r.Tool,
		IdempotencyClass: r.IdempotencyClass, ErrorClass: r.ErrorClass, ErrorReason: r.ErrorReason,
		Cause: r.Cause, DeletedBy: r.DeletedBy, DeletionTime: metav1.NewTime(r.DeletionTime), KeptUntil: r.KeptUntil,
	}
}

// Keep archives r at the end of its namespace's chain, at the time of its
// transaction, and returns its link. Keeping a record already archived
// changes nothing, so a replica that crashed after the commit and before the
// etcd delete may keep it again. mark is the cluster's mark of the
// namespace's chain (the zero Link for none): an archive that does not hold
// it answers ErrBehind and keeps nothing. The transaction commits
// synchronously, waiting for the server's synchronous standbys where it has
// any, a record kept before included: Keep returns only once the record is
// durable where a failover would land (ErrNotDurable when the server cannot
// say so). requireStandby refuses, ErrNotDurable, a server whose commits
// wait for no standby. Once the archive is decommissioned it answers
// ErrDecommissioned, whether or not it kept r.
func (s *Store) Keep(ctx context.Context, r Record, mark Link) (Link, error) {
	if r.NamespaceUID == "" {
		return Link{}, fmt.Errorf("cannot archive ToolAction %s/%s: its namespace's uid is not known", r.Namespace, r.Key)
	}
	// The columns keep microseconds; the chain hashes what they keep.
	r.CompletionTime, r.DeletionTime = r.CompletionTime.UTC().Truncate(time.Microsecond), r.DeletionTime.UTC().Truncate(time.Microsecond)
	ctx, cancel := context.WithTimeout(ctx, keepTimeout)
	defer cancel()
	var link Link
	err := s.sync.keepDurably(ctx, s.keys, func(conn *pgxpool.Conn) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			var err error
			link, err = s.keep(ctx, tx, &r, mark)
			return err
		})
	})
	switch {
	case errors.Is(err, ErrNotDurable):
		archiveErrors.WithLabelValues("durable").Inc()
		return Link{}, fmt.Errorf("cannot archive ToolAction %s/%s: %w", r.Namespace, r.Key, err)
	case errors.Is(err, ErrDecommissioned), errors.Is(err, ErrBehind):
		observe("keep", nil)
		return Link{}, fmt.Errorf("cannot archive ToolAction %s/%s: %w", r.Namespace, r.Key, err)
	case err != nil:
		observe("keep", err)
		return Link{}, fmt.Errorf("%w: cannot archive ToolAction %s/%s: %w", ErrUnavailable, r.Namespace, r.Key, err)
	}
	observe("keep", nil)
	return link, nil
}

// keep is Keep's transaction.
func (s *Store) keep(ctx context.Context, tx pgx.Tx, r *Record, mark Link) (Link, error) {
	// One append at a time in a namespace, whichever replica appends; the
	// shared lock is one of those that decommissioning waits for. The
	// commit waits for the synchronous standbys, whatever the role or the
	// DSN set, and no statement timeout cuts that wait short: keepTimeout
	// bounds the whole keep.
	if _, err := tx.Exec(ctx, `SELECT set_config('synchronous_commit', 'on', true), set_config('statement_timeout', '0', true),
	pg_advisory_xact_lock_shared($3), pg_advisory_xact_lock($1, hashtext($2))`,
		chainLock, r.Namespace, int64(decommissionLock)); err != nil {
		return Link{}, err
	}
	var (
		decommissioned bool
		actionText     string
		standbys       string
		keptSeq        *int64
		keptHash       string
		head           Link
		markHash       *string
	)
	// The chain hashes the action as the database keeps it (jsonb's
	// text), and the time of the transaction, which the append takes. A
	// record kept already reads its link: the zero Link when it was
	// archived before the chain.
	if err := tx.QueryRow(ctx, `SELECT kept.seq, coalesce(kept.hash, ''), $2::jsonb::text, (SELECT decommissioned_at IS NOT NULL FROM toolledger_archive),
	now(), current_setting('synchronous_standby_names'), `+holdingColumns("$3", "$4")+`
	FROM (SELECT 1) one LEFT JOIN LATERAL (SELECT coalesce(chain_seq, 0) AS seq, chain_hash AS hash FROM toolledger_records WHERE uid = $1) kept ON true`,
		string(r.UID), r.Action, r.Namespace, mark.Sequence).Scan(&keptSeq, &keptHash, &actionText, &decommissioned, &r.ArchivedAt, &standbys,
		&head.Sequence, &head.Hash, &markHash); err != nil {
		return Link{}, err
	}
	// Decommissioned first: the sweep moves a Tombstone by keeping it,
	// then deleting it, and the Tombstones decommissioning writes back
	// carry the UIDs of records already kept.
	switch {
	case decommissioned:
		return Link{}, ErrDecommissioned
	case s.requireStandby && standbys == "":
		return Link{}, fmt.Errorf("%w: its server's synchronous_standby_names is empty, and this manager requires a synchronous standby (--archive-require-synchronous-standby)", ErrNotDurable)
	}
	if err := holding(mark, head, markHash).Behind(r.Namespace, mark); err != nil {
		return Link{}, err
	}
	if keptSeq != nil {
		// Kept by an earlier try, whose commit may not have reached the
		// standbys: a transactional message in the WAL makes this commit
		// wait for them, and so for everything the server wrote before it.
		_, err := tx.Exec(ctx, `SELECT pg_logical_emit_message(true, 'toolledger', 'kept again')`)
		return Link{Sequence: *keptSeq, Hash: keptHash}, err
	}
	link, err := head.next(r, actionText)
	if err != nil {
		return Link{}, err
	}
	// The database's trigger checks the link and moves the head.
	_, err = tx.Exec(ctx, `
INSERT INTO toolledger_records (uid, namespace, namespace_uid, key, tool_kind, tool_name, idempotency_class, request_digest,
	phase, error_class, error_reason, external_ref, attempts, guards_key, completion_time, cause, deleted_by,
	deletion_time, action, chain_seq, chain_prev, chain_hash, archived_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23)`,
		string(r.UID), r.Namespace, string(r.NamespaceUID), r.Key, r.Tool.Kind, r.Tool.Name, string(r.IdempotencyClass), r.RequestDigest,
		string(r.Phase), string(r.ErrorClass), r.ErrorReason, r.ExternalRef, r.Attempts, r.GuardsKey,
		r.CompletionTime, r.Cause, r.DeletedBy, r.DeletionTime, r.Action, link.Sequence, head.Hash, link.Hash, r.ArchivedAt)
	return link, err
}

// KeyCheck is what the archive holds of a key in a namespace: the newest
// record that guards it in each life of the namespace's name.
type KeyCheck struct {
	// Current is the newest record of the namespace's current life that
	// guards the key; nil when none does.
	Current *Record
	// Earlier are the newest records of the name's earlier lives that
	// guard the key, newest first: namespaces deleted since, whose name the
	// current one took again (a restore from a backup, or a new tenant).
	// Each one's NamespaceUID names its life: "" for the records archived
	// before the archive kept uids.
	Earlier []*Record
	// Decommissioned reports an archive that was decommissioned: a key
	// check that leaves Tombstones unread learns with the key that
	// decommissioning writes them again. The ledger deletes a record only
	// after its Tombstone was written, and decommissioning commits before
	// it writes any, so a check of a key whose Tombstone it missed reads
	// true.
	Decommissioned bool
}

// CheckKey reads what the archive holds of key in namespace, in one round
// trip, given up after keyCheckTimeout. mark is the cluster's mark of the
// namespace's chain: an archive that does not hold it answers a
// *BehindError, whatever it holds of the key.
func (s *Store) CheckKey(ctx context.Context, namespace Namespace, key string, mark Link) (*KeyCheck, error) {
	ctx, cancel := context.WithTimeout(ctx, keyCheckTimeout)
	defer cancel()
	check := &KeyCheck{}
	var (
		head     Link
		markHash *string
	)
	batch := &pgx.Batch{}
	batch.Queue(`SELECT decommissioned_at IS NOT NULL, `+holdingColumns("$1", "$2")+` FROM toolledger_archive`,
		namespace.Name, mark.Sequence).QueryRow(func(row pgx.Row) error {
		return row.Scan(&check.Decommissioned, &head.Sequence, &head.Hash, &markHash)
	})
	batch.Queue(guardingByLife, newestArgs(namespace, key)...).Query(func(rows pgx.Rows) error {
		lives, err := pgx.CollectRows(rows, scanLife)
		for i := range lives {
			if lives[i].NamespaceUID == namespace.UID {
				check.Current = &lives[i]
			} else {
				check.Earlier = append(check.Earlier, &lives[i])
			}
		}
		slices.SortFunc(check.Earlier, func(a, b *Record) int { return b.CompletionTime.Compare(a.CompletionTime) })
		return err
	})
	err := s.keys.SendBatch(ctx, batch).Close()
	observe("check", err)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot check key %s/%s: %w", ErrUnavailable, namespace.Name, key, err)
	}
	if err := holding(mark, head, markHash).Behind(namespace.Name, mark); err != nil {
		return nil, fmt.Errorf("cannot check key %s/%s: %w", namespace.Name, key, err)
	}
	return check, nil
}

// guardingByLife reads the newest record that guards the key $2 in each
// life of the namespace $1, with the life's uid: the record's own, else,
// archived before the archive kept uids, the current namespace's ($3) when
// its action was created after that namespace was ($4), else "".
var guardingByLife = `SELECT DISTINCT ON (life) ` + recordColumns + `, life FROM (
	SELECT *, CASE WHEN namespace_uid IS NOT NULL THEN namespace_uid
		WHEN (action->'metadata'->>'creationTimestamp')::timestamptz >= $4 THEN $3 ELSE '' END AS life
	FROM toolledger_records WHERE namespace = $1 AND key = $2 AND guards_key) guarding
ORDER BY life, completion_time DESC`

// scanLife reads a record of guardingByLife, its NamespaceUID its life's.
func scanLife(row pgx.CollectableRow) (Record, error) {
	var (
		r    Record
		life string
	)
	raw := recordScan{record: &r}
	err := row.Scan(append(raw.dest(), &life)...)
	raw.finish()
	r.NamespaceUID = types.UID(life)
	return r, err
}

// Read returns the record of key archived from namespace that a person
// reading the key sees: the one the key check answers from (the newest
// that guards the key), else the newest; nil when the archive has none.
func (s *Store) Read(ctx context.Context, namespace Namespace, key string) (*Record, error) {
	r, err := newest(ctx, s.reads, "read", ofNamespace, "guards_key DESC, completion_time DESC", namespace, key)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot read key %s/%s: %w", ErrUnavailable, namespace.Name, key, err)
	}
	return r, nil
}

// archivedFrom is the condition that a row was archived from the
// namespace whose uid and creation time are the arguments uid and created:
// by its uid, or, archived before the archive kept uids, by its document's
// creation time, which follows the namespace's creation and precedes the
// deletion of any namespace of the name before it.
func archivedFrom(uid, created string) string {
	return `(namespace_uid = ` + uid + ` OR (namespace_uid IS NULL AND (action->'metadata'->>'creationTimestamp')::timestamptz >= ` + created + `))`
}

// ofNamespace is archivedFrom the arguments $3 and $4.
var ofNamespace = archivedFrom("$3", "$4")

// newest reads the first record of key archived from namespace that
// matches condition, in order; nil when there is none. operation names it
// in the metrics.
func newest(ctx context.Context, pool *pgxpool.Pool, operation, condition, order string, namespace Namespace, key string) (*Record, error) {
	rows, err := pool.Query(ctx, `SELECT `+recordColumns+` FROM toolledger_records
WHERE namespace = $1 AND key = $2 AND `+condition+` ORDER BY `+order+` LIMIT 1`, newestArgs(namespace, key)...)
	return collectNewest(operation, rows, err)
}

func newestArgs(namespace Namespace, key string) []any {
	return []any{namespace.Name, key, string(namespace.UID), namespace.Created}
}

func collectNewest(operation string, rows pgx.Rows, err error) (*Record, error) {
	var r Record
	if err == nil {
		r, err = pgx.CollectExactlyOneRow(rows, scanRecord)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		observe(operation, nil)
		return nil, nil
	}
	observe(operation, err)
	if err != nil {
		return nil, err
	}
	return &r, nil
}

const recordColumns = `uid, namespace, coalesce(namespace_uid, ''), key, tool_kind, tool_name, idempotency_class, request_digest, phase,
	error_class, error_reason, external_ref, attempts, guards_key, completion_time, cause, deleted_by, deletion_time, action,
	coalesce(chain_seq, 0), coalesce(chain_hash, ''), archived_at, coalesce(action->>'kind', '') = 'Tombstone',
	coalesce(action->'status'->>'keptUntil', action->'record'->>'keptUntil', '')`

func scanRecord(row pgx.CollectableRow) (Record, error) {
	var r Record
	raw := recordScan{record: &r}
	err := row.Scan(raw.dest()...)
	raw.finish()
	return r, err
}

// recordScan reads recordColumns into record; finish converts what the
// columns keep as text.
type recordScan struct {
	record                                      *Record
	uid, namespaceUID, class, phase, errorClass string
	keptUntil                                   string
}

func (s *recordScan) dest() []any {
	r := s.record
	return []any{&s.uid, &r.Namespace, &s.namespaceUID, &r.Key, &r.Tool.Kind, &r.Tool.Name, &s.class, &r.RequestDigest, &s.phase,
		&s.errorClass, &r.ErrorReason, &r.ExternalRef, &r.Attempts, &r.GuardsKey, &r.CompletionTime, &r.Cause,
		&r.DeletedBy, &r.DeletionTime, &r.Action, &r.Chain.Sequence, &r.Chain.Hash, &r.ArchivedAt, &r.FromTombstone, &s.keptUntil}
}

func (s *recordScan) finish() {
	r := s.record
	r.UID, r.NamespaceUID = types.UID(s.uid), types.UID(s.namespaceUID)
	r.IdempotencyClass, r.Phase, r.ErrorClass = v1alpha1.IdempotencyClass(s.class), v1alpha1.Phase(s.phase), v1alpha1.ErrorClass(s.errorClass)
	r.CompletionTime, r.DeletionTime, r.ArchivedAt = r.CompletionTime.UTC(), r.DeletionTime.UTC(), r.ArchivedAt.UTC()
	if kept, err := time.Parse(time.RFC3339, s.keptUntil); err == nil {
		r.KeptUntil = &metav1.Time{Time: kept}
	}
}

// Position is where a page of List starts: after the record it names.
// The zero Position starts at the beginning.
type Position struct {
	Namespace      string    `json:"n"`
	Key            string    `json:"k"`
	CompletionTime time.Time `json:"t"`
	UID            types.UID `json:"u"`
}

// Scope is where a List or Count reads: the records of Namespace ("" for
// every namespace) and, when Life is set, only those archived from that
// life of it, whose own records alone its list shows (a namespace created
// again under the name starts a new history).
type Scope struct {
	Namespace string
	Life      *Namespace
}

// listColumns are recordColumns with the action's parameters and its
// last-applied configuration left out, and whether it had them.
var listColumns = strings.Replace(recordColumns, "action,", `action #- '{spec,parameters}' #- '{metadata,annotations,`+corev1.LastAppliedConfigAnnotation+`}',`, 1) +
	`, coalesce(action->'spec' ? 'parameters', false), coalesce(action->'metadata'->'annotations' ? '` + corev1.LastAppliedConfigAnnotation + `', false)`

func scanListed(row pgx.CollectableRow) (Record, error) {
	var (
		r                 Record
		parameters, apply bool
	)
	raw := recordScan{record: &r}
	err := row.Scan(append(raw.dest(), &parameters, &apply)...)
	raw.finish()
	if parameters {
		r.Omitted = append(r.Omitted, OmittedParameters)
	}
	if apply {
		r.Omitted = append(r.Omitted, OmittedLastApplied)
	}
	return r, err
}

// listQuery is the condition and the arguments of the records in the
// scope in that match filter, after from; $6 is left for the limit.
func listQuery(in Scope, filter history.Filter, from Position, limit int) (string, []any) {
	// Two statements, so that each keeps an index plan for its own shape.
	where := `WHERE namespace = $1 AND (namespace, key, completion_time, uid) > ($2, $3, $4, $5)`
	if in.Namespace == "" {
		where = `WHERE $1 = '' AND (namespace, key, completion_time, uid) > ($2, $3, $4, $5)`
	}
	conds, args := filter.Where([]any{in.Namespace, from.Namespace, from.Key, from.CompletionTime, string(from.UID), limit})
	if in.Life != nil {
		args = append(args, string(in.Life.UID), in.Life.Created)
		conds = append(conds, archivedFrom(fmt.Sprintf("$%d", len(args)-1), fmt.Sprintf("$%d", len(args))))
	}
	for _, cond := range conds {
		where += " AND " + cond
	}
	return where, args
}

// List calls each with the records in the scope in that match filter,
// after from, ordered by namespace, key, completion time and uid, at most
// limit, one at a time as the database sends them, until each returns
// false. Their actions leave out what Omitted names. Each call is one
// query on the primary ordering, however deep it starts.
func (s *Store) List(ctx context.Context, in Scope, filter history.Filter, from Position, limit int, each func(*Record) bool) error {
	where, args := listQuery(in, filter, from, limit)
	rows, err := s.reads.Query(ctx, `
SELECT `+listColumns+`
FROM toolledger_records
`+where+`
ORDER BY namespace, key, completion_time, uid
LIMIT $6`, args...)
	if err == nil {
		err = forEach(rows, each)
	}
	observe("list", err)
	if err != nil {
		return fmt.Errorf("%w: cannot list the records of %s: %w", ErrUnavailable, scope(in.Namespace), err)
	}
	return nil
}

// forEach hands each of rows to each, one at a time, until it returns false.
func forEach(rows pgx.Rows, each func(*Record) bool) error {
	defer rows.Close()
	for rows.Next() {
		r, err := scanListed(rows)
		if err != nil {
			return err
		}
		if !each(&r) {
			break
		}
	}
	return rows.Err()
}

// Count counts the records a List in the scope in and of filter from the
// start would return, up to atMost: so that a list that must not be cut short
// can be refused before it starts, at a cost bounded however many match.
func (s *Store) Count(ctx context.Context, in Scope, filter history.Filter, atMost int) (int, error) {
	where, args := listQuery(in, filter, Position{}, atMost)
	var n int
	err := s.reads.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM toolledger_records `+where+` LIMIT $6) matched`, args...).Scan(&n)
	observe("list", err)
	if err != nil {
		return 0, fmt.Errorf("%w: cannot count the records of %s: %w", ErrUnavailable, scope(in.Namespace), err)
	}
	return n, nil
}

// Position is where a list after r starts.
func (r *Record) Position() Position {
	return Position{Namespace: r.Namespace, Key: r.Key, CompletionTime: r.CompletionTime, UID: r.UID}
}

func scope(namespace string) string {
	if namespace == "" {
		return "every namespace"
	}
	return "namespace " + namespace
}

// CurrentNamespace reads the namespace now under name, as reader has it
// (the manager's cache of namespaces' metadata).
func CurrentNamespace(ctx context.Context, reader client.Reader, name string) (Namespace, error) {
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := reader.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
		return Namespace{}, fmt.Errorf("cannot read namespace %s: %w", name, err)
	}
	return Namespace{Name: name, UID: ns.UID, Created: ns.CreationTimestamp.UTC()}, nil
}
