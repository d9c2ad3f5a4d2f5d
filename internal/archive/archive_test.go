package archive_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/archive"
	"github.com/toolledger/toolledger/internal/testenv"
)

// server is a real PostgreSQL server for the package's tests; each test
// has a database of its own.
var server *testenv.Postgres

func TestMain(m *testing.M) {
	ctx := context.Background()
	var err error
	if server, err = testenv.StartPostgres(ctx, ""); err != nil {
		fmt.Fprintln(os.Stderr, "cannot start PostgreSQL for the archive's tests:", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := server.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "cannot stop PostgreSQL:", err)
	}
	os.Exit(code)
}

// database creates the test's own database and returns its DSN.
func database(t *testing.T) string {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()))
	dsn, err := server.Database(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return dsn
}

func open(t testing.TB, dsn string) *archive.Store {
	t.Helper()
	s, err := archive.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// query runs sql on dsn outside the Store, as an auditor's psql would.
func query[T any](t *testing.T, dsn, sql string, args ...any) T {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var v T
	if err := conn.QueryRow(ctx, sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

var t0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

// guarding is the record of the namespace's current life that a key check
// of key answers from; nil when there is none.
func guarding(s *archive.Store, ctx context.Context, ns archive.Namespace, key string) (*archive.Record, error) {
	check, err := s.CheckKey(ctx, ns, key, archive.Link{})
	if err != nil {
		return nil, err
	}
	return check.Current, nil
}

// finished is a finished action order-1 of tool "charge" in namespace "shop".
func finished(uid string, attempts int32, completed time.Time) *v1alpha1.ToolAction {
	return &v1alpha1.ToolAction{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "order-1", UID: types.UID(uid),
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec: v1alpha1.ToolActionSpec{ToolRef: v1alpha1.ToolReference{Name: "charge"},
			Parameters: map[string]apiextensionsv1.JSON{"amount": {Raw: []byte(`1200`)}, "currency": {Raw: []byte(`"eur"`)}}},
		Status: v1alpha1.ToolActionStatus{Phase: v1alpha1.PhaseSucceeded, RequestDigest: "sha256:" + uid, Attempts: attempts,
			ExternalRef: "ch_" + uid, CompletionTime: &metav1.Time{Time: completed}},
	}
}

// namespaceOf is the namespace the tests' records of name are archived
// from.
func namespaceOf(name string) archive.Namespace {
	return archive.Namespace{Name: name, UID: types.UID(name + "-uid"), Created: t0.Add(-24 * time.Hour)}
}

func record(t testing.TB, a *v1alpha1.ToolAction) archive.Record {
	t.Helper()
	tool := &v1alpha1.Tool{Spec: v1alpha1.ToolSpec{IdempotencyClass: v1alpha1.KeyProtected}}
	r, err := archive.NewRecord(a, namespaceOf(a.Namespace).UID, tool, v1alpha1.TombstoneCauseRecordRetention, "toolledger (executor-a)", a.Status.CompletionTime.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestReplicasStartingAtOnceMigrateTheSchemaOnce(t *testing.T) {
	dsn := database(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := archive.Open(context.Background(), dsn)
			if err == nil {
				s.Close()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("replica %d: %v", i, err)
		}
	}
	if n := query[int](t, dsn, `SELECT count(*) FROM toolledger_schema_migrations`); n != archive.SchemaVersion() {
		t.Errorf("%d migrations recorded, want %d", n, archive.SchemaVersion())
	}
	if n := query[int](t, dsn, `SELECT count(*) FROM toolledger_records`); n != 0 {
		t.Errorf("a new archive holds %d records", n)
	}
}

func TestAManagerRefusesASchemaNewerThanItsOwn(t *testing.T) {
	dsn := database(t)
	open(t, dsn).Close()
	query[int](t, dsn, `INSERT INTO toolledger_schema_migrations (version) VALUES ($1) RETURNING version`, archive.SchemaVersion()+1)
	_, err := archive.Open(context.Background(), dsn)
	want := fmt.Sprintf("the archive's schema is at version %d, newer than this manager's %d: upgrade the manager", archive.SchemaVersion()+1, archive.SchemaVersion())
	if err == nil || err.Error() != want {
		t.Fatalf("Open on a newer schema: %v, want %q", err, want)
	}
}

// A role that may read the migrations, read and insert records, read the
// heads and the pruned links and prune through the pruning functions, and
// nothing else, runs a manager once the schema is migrated.
func TestAManagerRunsWithALeastPrivilegedRoleOnAMigratedSchema(t *testing.T) {
	dsn := database(t)
	open(t, dsn).Close()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `CREATE ROLE ledger_writer LOGIN;
		GRANT SELECT ON toolledger_schema_migrations TO ledger_writer;
		GRANT SELECT, INSERT ON toolledger_records TO ledger_writer;
		GRANT SELECT ON toolledger_chain_pruned, toolledger_archive, toolledger_namespaces, toolledger_chain_heads TO ledger_writer;
		GRANT EXECUTE ON FUNCTION toolledger_prune_tool(text, text, text, timestamptz, timestamptz, timestamptz, integer) TO ledger_writer;
		GRANT EXECUTE ON FUNCTION toolledger_prune_namespace(text, text, timestamptz, timestamptz, timestamptz, timestamptz, integer) TO ledger_writer`); err != nil {
		t.Fatal(err)
	}
	writer := strings.Replace(dsn, "toolledger@", "ledger_writer@", 1)
	s := open(t, writer)
	ctx := context.Background()
	if _, err := s.Keep(ctx, record(t, finished("u-1", 1, t0)), archive.Link{}); err != nil {
		t.Fatal(err)
	}
	if got, err := guarding(s, ctx, namespaceOf("shop"), "order-1"); err != nil || got == nil || got.UID != "u-1" {
		t.Fatalf("Guarding as the least-privileged role: %v, %v", got, err)
	}
	// It may neither change nor delete a record, nor forge a pruned link…
	for _, sql := range []string{
		`UPDATE toolledger_records SET external_ref = 'ch_forged'`,
		`DELETE FROM toolledger_records`,
		`INSERT INTO toolledger_chain_pruned (namespace, first_seq, last_seq, first_prev, last_hash) VALUES ('shop', 2, 2, '', '')`,
		`SELECT toolledger_chain_note_pruned('shop', 2, '', '')`,
		`UPDATE toolledger_chain_heads SET started_at = now() - interval '1 year'`,
		`INSERT INTO toolledger_chain_heads (namespace, seq, hash) VALUES ('other', 1, 'c0ffee')`,
	} {
		conn, err := pgx.Connect(ctx, writer)
		if err != nil {
			t.Fatal(err)
		}
		_, err = conn.Exec(ctx, sql)
		_ = conn.Close(ctx)
		if err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("%s as the manager's role: %v, want permission denied", sql, err)
		}
	}
	// A temporary table of the role's cannot stand in for the archive's
	// inside toolledger_prune, which runs as the owner.
	conn, err = pgx.Connect(ctx, writer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TEMP TABLE toolledger_records (LIKE public.toolledger_records INCLUDING DEFAULTS);
		INSERT INTO toolledger_records (uid, namespace, key, tool_kind, tool_name, idempotency_class, request_digest, phase,
			error_class, error_reason, external_ref, attempts, guards_key, completion_time, cause, deleted_by, deletion_time, action,
			chain_seq, chain_prev, chain_hash)
		VALUES ('forged', 'shop', 'k', 'Tool', 'forged', '', '', '', '', '', '', 1, true, '2000-01-01', '', '', '2000-01-01', '{}', 7, '', 'c0ffee');
		SELECT toolledger_prune_tool('Tool', 'shop', 'forged', now(), now(), now(), 10)`); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(ctx)
	if n := query[int](t, dsn, `SELECT count(*) FROM toolledger_chain_pruned`); n != 0 {
		t.Fatalf("pruning through the role's temporary table left %d pruned links", n)
	}
	// …but prunes by retention, through toolledger_prune_tool, which logs it,
	// and verifies.
	if n, err := s.Prune(ctx, []archive.Cutoff{{Kind: v1alpha1.KindTool, Namespace: "shop", Name: "charge", Before: t0.Add(time.Hour)}}); err != nil || n != 1 {
		t.Fatalf("Prune as the least-privileged role: %d, %v; want 1", n, err)
	}
	if v, err := s.Verify(ctx, "shop", archive.VerifyFrom{}); err != nil || v.Broken != nil || v.Pruned != 1 {
		t.Fatalf("Verify as the least-privileged role: %+v, %v", v, err)
	}
	if logged := query[string](t, dsn, `SELECT pruned_by || ' ' || tool_kind || ' ' || namespace || '/' || tool_name || ' ' || records FROM toolledger_prune_log`); logged != "ledger_writer Tool shop/charge 1" {
		t.Errorf("prune log: %q, want the role, the cutoff's tool and the count", logged)
	}
}

// A role granted for an older schema is refused at start, with what it
// lacks, rather than failing every keep later.
func TestAManagerRefusesARoleThatCannotKeepRecords(t *testing.T) {
	dsn := database(t)
	open(t, dsn).Close()
	exec(t, dsn, `CREATE ROLE ledger_old LOGIN;
		GRANT SELECT ON toolledger_schema_migrations TO ledger_old;
		GRANT SELECT, INSERT, DELETE ON toolledger_records TO ledger_old`)
	_, err := archive.Open(context.Background(), strings.Replace(dsn, "toolledger@", "ledger_old@", 1))
	want := "the archive's database role lacks SELECT on toolledger_chain_heads, SELECT on toolledger_chain_pruned, SELECT on toolledger_archive, SELECT on toolledger_namespaces: grant them (docs/audit.md, \"The database's roles\")"
	if err == nil || err.Error() != want {
		t.Fatalf("Open as a role of the older schema: %v, want %q", err, want)
	}
}

func TestKeepingARecordAgainChangesNothing(t *testing.T) {
	dsn := database(t)
	s := open(t, dsn)
	r := record(t, finished("u-1", 1, t0))
	// A replica that crashed between the commit and the etcd delete keeps
	// it again, maybe while another replica does.
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Keep(context.Background(), r, archive.Link{}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := query[int](t, dsn, `SELECT count(*) FROM toolledger_records WHERE key = 'order-1'`); n != 1 {
		t.Fatalf("%d rows after keeping one record 8 times, want 1", n)
	}
	got, err := guarding(s, context.Background(), namespaceOf("shop"), "order-1")
	if err != nil || got == nil {
		t.Fatalf("Get: %v, %v", got, err)
	}
	if got.Tombstone() != r.Tombstone() {
		t.Errorf("read back %+v, want %+v", got.Tombstone(), r.Tombstone())
	}
	var action v1alpha1.ToolAction
	if err := json.Unmarshal(got.Action, &action); err != nil {
		t.Fatal(err)
	}
	if params, _ := json.Marshal(action.Spec.Parameters); string(params) != `{"amount":1200,"currency":"eur"}` || action.ManagedFields != nil {
		t.Errorf("archived action: parameters %s, managedFields %v; want the parameters and no managedFields", params, action.ManagedFields)
	}
}

func TestTheKeyCheckReadsTheNewestRecordThatGuardsTheKey(t *testing.T) {
	dsn := database(t)
	s := open(t, dsn)
	ctx := context.Background()
	older, newer := finished("u-old", 1, t0), finished("u-new", 2, t0.Add(time.Hour))
	// Rejected before any dispatch: it caused nothing, and guards nothing.
	rejected := finished("u-rejected", 0, t0.Add(2*time.Hour))
	rejected.Status.Phase = v1alpha1.PhaseFailed
	elsewhere := finished("u-elsewhere", 1, t0.Add(3*time.Hour))
	elsewhere.Namespace = "other-tenant"
	for _, a := range []*v1alpha1.ToolAction{older, newer, rejected, elsewhere} {
		if _, err := s.Keep(ctx, record(t, a), archive.Link{}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := guarding(s, ctx, namespaceOf("shop"), "order-1")
	if err != nil || got == nil {
		t.Fatalf("Guarding: %v, %v", got, err)
	}
	if got.UID != "u-new" || got.ExternalRef != "ch_u-new" || !got.GuardsKey {
		t.Errorf("the key answers from %s (%s), want u-new", got.UID, got.ExternalRef)
	}
	if none, err := guarding(s, ctx, namespaceOf("shop"), "order-2"); none != nil || err != nil {
		t.Errorf("a key never archived: %v, %v; want nil, nil", none, err)
	}
	// A person reading the key sees the record it answers from, though a
	// newer one guards nothing.
	if read, err := s.Read(ctx, namespaceOf("shop"), "order-1"); err != nil || read == nil || read.UID != "u-new" {
		t.Errorf("Read: %v, %v; want u-new", read, err)
	}
}

func TestAnUnfinishedActionIsNotArchived(t *testing.T) {
	a := finished("u-1", 1, t0)
	a.Status.CompletionTime = nil
	_, err := archive.NewRecord(a, "shop-uid", nil, v1alpha1.TombstoneCauseDeleted, "", t0)
	if want := "ToolAction shop/order-1 has not finished: it cannot be archived"; err == nil || err.Error() != want {
		t.Fatalf("NewRecord of an unfinished action: %v, want %q", err, want)
	}
}

// The schema's owner migrates and grants the managers' own role what it
// needs; that role then runs a manager, and could not have migrated the
// schema itself.
func TestMigrateGrantsTheManagersRoleWhatItNeeds(t *testing.T) {
	ctx := context.Background()
	dsn := database(t)
	exec(t, dsn, `CREATE ROLE ledger_runtime LOGIN`)
	runtime := strings.Replace(dsn, "toolledger@", "ledger_runtime@", 1)
	_, err := archive.Open(ctx, runtime)
	want := fmt.Sprintf("the archive's schema is at version 0 and this manager needs %d, which its database role cannot migrate: "+
		"run `manager migrate-archive` with the schema owner's DSN first (the chart's archive migration Job does; docs/audit.md, \"The database's roles\")",
		archive.SchemaVersion())
	if err == nil || err.Error() != want {
		t.Fatalf("Open as a role that cannot migrate: %v, want %q", err, want)
	}
	if err := archive.Migrate(ctx, dsn, "ledger_runtime"); err != nil {
		t.Fatal(err)
	}
	s := open(t, runtime)
	if s.OwnsSchema() {
		t.Error("the managers' role owns the schema")
	}
	if _, err := s.Keep(ctx, record(t, finished("u-1", 1, t0)), archive.Link{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Prune(ctx, []archive.Cutoff{{Kind: v1alpha1.KindTool, Namespace: "shop", Name: "charge", Before: t0}}); err != nil {
		t.Fatalf("Prune as the managers' role: %v", err)
	}
	if err := execErr(runtime, `UPDATE toolledger_records SET external_ref = 'ch_forged'`); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("UPDATE as the managers' role: %v, want permission denied", err)
	}
	if owner := open(t, dsn); !owner.OwnsSchema() {
		t.Error("the owner's store does not own the schema")
	}
}

// A record whose answers stated a keptUntil reads it back, and is not
// pruned before it, however short the tool's keyRetention is now.
func TestPruningKeepsARecordUntilTheKeptUntilItsAnswersStated(t *testing.T) {
	dsn := database(t)
	s := open(t, dsn)
	ctx := context.Background()
	promised := finished("u-promised", 1, t0)
	promised.Status.KeptUntil = &metav1.Time{Time: t0.Add(48 * time.Hour)}
	plain := finished("u-plain", 1, t0)
	plain.Name = "order-2"
	for _, a := range []*v1alpha1.ToolAction{promised, plain} {
		if _, err := s.Keep(ctx, record(t, a), archive.Link{}); err != nil {
			t.Fatal(err)
		}
	}
	// A document the API server would not have stored: its row stays, and
	// the prune goes on.
	malformed := record(t, finished("u-malformed", 1, t0))
	malformed.Key = "order-3"
	malformed.Action = []byte(strings.Replace(string(malformed.Action), `"status":{`, `"status":{"keptUntil":"next tuesday",`, 1))
	if _, err := s.Keep(ctx, malformed, archive.Link{}); err != nil {
		t.Fatal(err)
	}
	got, err := guarding(s, ctx, namespaceOf("shop"), "order-1")
	if err != nil || got == nil || got.KeptUntil == nil || !got.KeptUntil.Equal(promised.Status.KeptUntil) {
		t.Fatalf("CheckKey: %+v, %v; want keptUntil %s read back", got, err, promised.Status.KeptUntil)
	}
	if tomb := got.Tombstone(); tomb.KeptUntil == nil || !tomb.KeptUntil.Equal(promised.Status.KeptUntil) {
		t.Errorf("the record as a Tombstone: keptUntil %v, want %s", tomb.KeptUntil, promised.Status.KeptUntil)
	}
	cutoff := func(keptBefore time.Time) []archive.Cutoff {
		return []archive.Cutoff{{Kind: v1alpha1.KindTool, Namespace: "shop", Name: "charge", Before: t0.Add(time.Hour), KeptBefore: keptBefore}}
	}
	if n, err := s.Prune(ctx, cutoff(t0.Add(24*time.Hour))); err != nil || n != 1 {
		t.Fatalf("Prune before the promise: %d, %v; want 1, the record without one", n, err)
	}
	if kept, err := guarding(s, ctx, namespaceOf("shop"), "order-1"); err != nil || kept == nil {
		t.Fatalf("the promised record after the prune: %v, %v; want it kept", kept, err)
	}
	if n, err := s.Prune(ctx, cutoff(t0.Add(49*time.Hour))); err != nil || n != 1 {
		t.Fatalf("Prune after the promise: %d, %v; want 1, not the malformed row", n, err)
	}
	if kept, err := guarding(s, ctx, namespaceOf("shop"), "order-3"); err != nil || kept == nil || kept.KeptUntil != nil {
		t.Fatalf("the malformed row after the prune: %+v, %v; want it kept, with no keptUntil read", kept, err)
	}
}
