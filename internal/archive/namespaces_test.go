package archive_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/toolledger/toolledger/internal/archive"
)

// A namespace deleted and created again under its name is another tenant:
// the key check and reads of the new one never answer from the old one's
// records, whether archived with the namespace's uid or before the archive
// kept uids (told apart by when their action was created).
func TestANamespaceCreatedAgainStartsANewHistory(t *testing.T) {
	ctx := context.Background()
	dsn := database(t)
	s := open(t, dsn)
	old := archive.Namespace{Name: "shop", UID: "shop-old", Created: t0.Add(-72 * time.Hour)}
	current := archive.Namespace{Name: "shop", UID: "shop-new", Created: t0.Add(-time.Hour)}
	a := finished("u-old", 1, t0.Add(-48*time.Hour))
	r, err := archive.NewRecord(a, old.UID, nil, "Deleted", "", t0.Add(-47*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Keep(ctx, r, archive.Link{}); err != nil {
		t.Fatal(err)
	}
	// Rows of before the archive kept uids: one of an action created under
	// the old namespace, one under the current.
	exec(t, dsn, `SET session_replication_role = replica;
	INSERT INTO toolledger_records (uid, namespace, key, tool_kind, tool_name, idempotency_class, request_digest, phase, error_class,
		error_reason, external_ref, attempts, guards_key, completion_time, cause, deleted_by, deletion_time, action, archived_at)
	VALUES
	('legacy-old', 'shop', 'order-2', 'Tool', 'charge', '', 'sha256:2', 'Succeeded', '', '', 'ch_2', 1, true, '2026-12-01T12:00:00Z', 'Deleted', '',
		'2026-12-01T12:00:00Z', '{"metadata": {"creationTimestamp": "2026-12-01T11:00:00Z"}}', '2026-12-01T12:00:00Z'),
	('legacy-new', 'shop', 'order-3', 'Tool', 'charge', '', 'sha256:3', 'Succeeded', '', '', 'ch_3', 1, true, '2026-12-03T11:30:00Z', 'Deleted', '',
		'2026-12-03T11:30:00Z', '{"metadata": {"creationTimestamp": "2026-12-03T11:10:00Z"}}', '2026-12-03T11:30:00Z');
	INSERT INTO toolledger_namespaces (namespace, namespace_uid) VALUES ('shop', '')`)

	for _, tc := range []struct {
		ns   archive.Namespace
		key  string
		want string
	}{
		{old, "order-1", "u-old"},
		{current, "order-1", ""},
		{current, "order-2", ""},
		{current, "order-3", "legacy-new"},
	} {
		for name, read := range map[string]func(context.Context, archive.Namespace, string) (*archive.Record, error){"Guarding": func(ctx context.Context, ns archive.Namespace, key string) (*archive.Record, error) {
			return guarding(s, ctx, ns, key)
		}, "Read": s.Read} {
			got, err := read(ctx, tc.ns, tc.key)
			if err != nil {
				t.Fatal(err)
			}
			if uid := uidOf(got); uid != tc.want {
				t.Errorf("%s(%s, %s) = %q, want %q", name, tc.ns.UID, tc.key, uid, tc.want)
			}
		}
	}

	// The history retention prunes the old namespace's records (archived
	// before now), and none of the current one's, once the current one
	// released that life.
	lifeOf := func(_ string, uid types.UID) (archive.Life, error) {
		if uid == current.UID {
			return archive.Life{Current: &current, Fate: archive.LifeKept}, nil
		}
		return archive.Life{Current: &current, Fate: archive.LifeReleased}, nil
	}
	pruned, err := s.PruneNamespaces(ctx, lifeOf, archive.NamespaceCutoffs{Before: time.Now().Add(time.Minute)})
	if err != nil || pruned != 2 {
		t.Fatalf("PruneNamespaces = %d, %v; want 2", pruned, err)
	}
	if got := uidsLeft(t, dsn); !slices.Equal(got, []string{"legacy-new"}) {
		t.Fatalf("left %v, want the current namespace's record", got)
	}
	if v := verify(t, s, "shop"); v.Broken != nil || v.Pruned != 1 {
		t.Fatalf("the chain after pruning the old namespace's link: %+v", v)
	}
	if known := query[string](t, dsn, `SELECT string_agg(namespace_uid, ',' ORDER BY namespace_uid) FROM toolledger_namespaces`); known != "" {
		t.Errorf("namespaces still listed: %q, want only the current one's before-uid records (\"\")", known)
	}
}

func uidOf(r *archive.Record) string {
	if r == nil {
		return ""
	}
	return string(r.UID)
}

// The manager's role may append the next link of a chain, archived now,
// and nothing else: a backdated guarding row outside the chain, a link
// archived at another time, or one that does not follow the head, is
// refused by the database, so that neither verification nor the key check
// can be fooled by that role.
func TestTheManagersRoleCanOnlyAppendTheNextLinkNow(t *testing.T) {
	ctx := context.Background()
	dsn := database(t)
	open(t, dsn).Close()
	exec(t, dsn, `CREATE ROLE ledger_appender LOGIN;
		GRANT SELECT ON toolledger_schema_migrations, toolledger_chain_pruned, toolledger_archive, toolledger_namespaces, toolledger_chain_heads TO ledger_appender;
		GRANT SELECT, INSERT ON toolledger_records TO ledger_appender`)
	writer := strings.Replace(dsn, "toolledger@", "ledger_appender@", 1)
	s := open(t, writer)
	if _, err := s.Keep(ctx, record(t, finished("u-1", 1, t0)), archive.Link{}); err != nil {
		t.Fatal(err)
	}
	head := verify(t, s, "shop").Head
	columns := `uid, namespace, namespace_uid, key, tool_kind, tool_name, idempotency_class, request_digest, phase, error_class,
		error_reason, external_ref, attempts, guards_key, completion_time, cause, deleted_by, deletion_time, action`
	row := `'forged', 'shop', 'shop-uid', 'order-9', 'Tool', 'charge', '', 'sha256:9', 'Succeeded', '', '', 'ch_forged', 1, true,
		'2026-11-01T00:00:00Z', 'Deleted', '', '2026-11-01T00:00:00Z', '{}'`
	for name, sql := range map[string]string{
		"a backdated row outside the chain":     `INSERT INTO toolledger_records (` + columns + `, archived_at) VALUES (` + row + `, '2026-11-01T00:00:00Z')`,
		"a row outside the chain, archived now": `INSERT INTO toolledger_records (` + columns + `) VALUES (` + row + `)`,
		"the next link, backdated": `INSERT INTO toolledger_records (` + columns + `, chain_seq, chain_prev, chain_hash, archived_at) VALUES (` + row +
			`, 2, '` + head.Hash + `', 'c0ffee', '2026-11-01T00:00:00Z')`,
		"a link that does not follow the head": `INSERT INTO toolledger_records (` + columns + `, chain_seq, chain_prev, chain_hash, archived_at) VALUES (` + row +
			`, 5, 'beef', 'c0ffee', now())`,
		"a link without the namespace's uid": `INSERT INTO toolledger_records (` + strings.Replace(columns, "namespace_uid, ", "", 1) +
			`, chain_seq, chain_prev, chain_hash, archived_at) VALUES (` + strings.Replace(row, "'shop-uid', ", "", 1) + `, 2, '` + head.Hash + `', 'c0ffee', now())`,
	} {
		if err := execErr(writer, sql); err == nil || !strings.Contains(err.Error(), "SQLSTATE 23514") {
			t.Errorf("%s as the manager's role: %v, want the append trigger's refusal (check_violation)", name, err)
		}
	}
	if got, err := guarding(s, ctx, namespaceOf("shop"), "order-9"); err != nil || got != nil {
		t.Errorf("the key check answers from %+v, %v; want nothing", got, err)
	}
	if v := verify(t, s, "shop"); v.Broken != nil || v.Records != 1 || v.Unchained != 0 {
		t.Errorf("the chain: %+v, want one record and nothing else", v)
	}
}

// The records of an earlier life that nobody released (its name gone, or
// taken again by a namespace that did not decide about it) keep their keys
// for their retention before the history retention prunes them: a
// namespace restored from a backup later still finds them. A released
// life's go once the history retention passed.
func TestAnUnclaimedLifeKeepsItsKeysForTheirRetention(t *testing.T) {
	ctx := context.Background()
	dsn := database(t)
	s := open(t, dsn)
	gone := archive.Namespace{Name: "gone", UID: "gone-1", Created: t0.Add(-72 * time.Hour)}
	promised := metav1.NewTime(t0.Add(30 * 24 * time.Hour))
	for _, tc := range []struct {
		uid       string
		completed time.Time
		keptUntil *metav1.Time
	}{
		{"u-old", t0.Add(-100 * 24 * time.Hour), nil},
		{"u-recent", t0.Add(-time.Hour), nil},
		{"u-promised", t0.Add(-100 * 24 * time.Hour), &promised},
	} {
		a := finished(tc.uid, 1, tc.completed)
		a.Namespace, a.Name, a.Status.KeptUntil = "gone", tc.uid, tc.keptUntil
		r, err := archive.NewRecord(a, gone.UID, nil, "Deleted", "", tc.completed)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Keep(ctx, r, archive.Link{}); err != nil {
			t.Fatal(err)
		}
	}
	unclaimed := func(string, types.UID) (archive.Life, error) { return archive.Life{Fate: archive.LifeUnclaimed}, nil }
	cutoffs := archive.NamespaceCutoffs{Before: time.Now().Add(time.Minute), KeysBefore: t0.Add(-90 * 24 * time.Hour), KeptBefore: t0}
	if pruned, err := s.PruneNamespaces(ctx, unclaimed, cutoffs); err != nil || pruned != 1 {
		t.Fatalf("PruneNamespaces of the unclaimed life = %d, %v; want 1, the record past the key retention", pruned, err)
	}
	if got := uidsLeft(t, dsn); !slices.Equal(got, []string{"u-promised", "u-recent"}) {
		t.Fatalf("left %v, want the records whose keys are still kept", got)
	}
	released := func(string, types.UID) (archive.Life, error) { return archive.Life{Fate: archive.LifeReleased}, nil }
	if pruned, err := s.PruneNamespaces(ctx, released, cutoffs); err != nil || pruned != 2 {
		t.Fatalf("PruneNamespaces of the released life = %d, %v; want 2", pruned, err)
	}
}
