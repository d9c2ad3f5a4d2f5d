package archive_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/archive"
)

// keepInOrder keeps, in namespace, one finished action of tool charge for
// each key, in order, completed an hour apart from t0.
func keepInOrder(t *testing.T, s *archive.Store, namespace string, keys ...string) {
	t.Helper()
	for i, key := range keys {
		a := finished(namespace+"-"+key, 1, t0.Add(time.Duration(i)*time.Hour))
		a.Namespace, a.Name = namespace, key
		if _, err := s.Keep(context.Background(), record(t, a), archive.Link{}); err != nil {
			t.Fatal(err)
		}
	}
}

// exec runs sql on dsn outside the Store, as a superuser's psql would.
func exec(t *testing.T, dsn, sql string) {
	t.Helper()
	if err := execErr(dsn, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// execErr runs sql on a connection of its own.
func execErr(dsn, sql string) error {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

func verify(t *testing.T, s *archive.Store, namespace string) *archive.Verification {
	t.Helper()
	v, err := s.Verify(context.Background(), namespace, archive.VerifyFrom{})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func wantBreak(t *testing.T, v *archive.Verification, want archive.Break) {
	t.Helper()
	if v.Broken == nil {
		t.Fatalf("the chain of %s verifies (head %d), want it broken at %+v", v.Namespace, v.Head.Sequence, want)
	}
	if *v.Broken != want {
		t.Errorf("broken at %+v, want %+v", *v.Broken, want)
	}
}

func TestAnUntouchedHistoryVerifies(t *testing.T) {
	dsn := database(t)
	s := open(t, dsn)
	keepInOrder(t, s, "shop", "k1", "k2", "k3", "k4", "k5")
	keepInOrder(t, s, "other", "k1", "k2")
	v := verify(t, s, "shop")
	if v.Broken != nil || v.Records != 5 || v.Head.Sequence != 5 || v.Unchained != 0 || v.Pruned != 0 {
		t.Fatalf("verification of an untouched chain: %+v", v)
	}
	newest, err := s.Read(context.Background(), namespaceOf("shop"), "k5")
	if err != nil {
		t.Fatal(err)
	}
	if newest.Chain != v.Head || len(v.Head.Hash) != 64 {
		t.Errorf("head %+v, want the newest record's link %+v", v.Head, newest.Chain)
	}
	if other := verify(t, s, "other"); other.Broken != nil || other.Head.Sequence != 2 {
		t.Errorf("a second namespace has a chain of its own: %+v", other)
	}
	if namespaces, err := s.Namespaces(context.Background()); err != nil || strings.Join(namespaces, ",") != "other,shop" {
		t.Errorf("Namespaces: %v, %v", namespaces, err)
	}
	// Keeping a record again appends nothing.
	keepInOrder(t, s, "shop", "k1")
	if again := verify(t, s, "shop"); again.Head != v.Head {
		t.Errorf("keeping a record again moved the head from %+v to %+v", v.Head, again.Head)
	}
}

func TestVerifyNamesARecordChangedAsASuperuser(t *testing.T) {
	for _, change := range []string{
		`UPDATE toolledger_records SET external_ref = 'ch_forged' WHERE namespace = 'shop' AND key = 'k3'`,
		`UPDATE toolledger_records SET action = jsonb_set(action, '{status,externalRef}', '"ch_forged"') WHERE namespace = 'shop' AND key = 'k3'`,
		`UPDATE toolledger_records SET completion_time = completion_time + interval '1 second' WHERE namespace = 'shop' AND key = 'k3'`,
		`UPDATE toolledger_records SET chain_hash = 'c0ffee' WHERE namespace = 'shop' AND key = 'k3'`,
	} {
		t.Run(change[strings.Index(change, "SET")+4:strings.Index(change, " =")], func(t *testing.T) {
			dsn := database(t)
			s := open(t, dsn)
			keepInOrder(t, s, "shop", "k1", "k2", "k3", "k4", "k5")
			exec(t, dsn, change)
			wantBreak(t, verify(t, s, "shop"), archive.Break{Sequence: 3, Key: "k3", UID: "shop-k3",
				Problem: "its columns no longer hash to its link: it was changed after it was archived"})
		})
	}
}

func TestVerifyNamesADeletedRecord(t *testing.T) {
	dsn := database(t)
	s := open(t, dsn)
	keepInOrder(t, s, "shop", "k1", "k2", "k3", "k4", "k5")
	exec(t, dsn, `DELETE FROM toolledger_records WHERE namespace = 'shop' AND key IN ('k2', 'k3')`)
	wantBreak(t, verify(t, s, "shop"), archive.Break{Sequence: 2, Problem: "records 2 to 3 are missing: deleted, not pruned"})
}

// The newest record's deletion shows against the head kept apart from the
// records, and so does its deletion with a record kept after it.
func TestVerifyNamesADeletedNewestRecord(t *testing.T) {
	dsn := database(t)
	s := open(t, dsn)
	keepInOrder(t, s, "shop", "k1", "k2", "k3")
	exec(t, dsn, `DELETE FROM toolledger_records WHERE namespace = 'shop' AND key = 'k3'`)
	wantBreak(t, verify(t, s, "shop"), archive.Break{Sequence: 3, Problem: "record 3 is missing: deleted, not pruned"})
	keepInOrder(t, s, "shop", "k4")
	wantBreak(t, verify(t, s, "shop"), archive.Break{Sequence: 3, Problem: "record 3 is missing: deleted, not pruned"})
}

func TestVerifyNamesAChainRewrittenFromARecord(t *testing.T) {
	dsn := database(t)
	s := open(t, dsn)
	keepInOrder(t, s, "shop", "k1", "k2", "k3")
	exec(t, dsn, `UPDATE toolledger_records SET chain_prev = 'c0ffee' WHERE namespace = 'shop' AND key = 'k2'`)
	wantBreak(t, verify(t, s, "shop"), archive.Break{Sequence: 2, Key: "k2", UID: "shop-k2",
		Problem: "it does not follow the hash of record 1: the chain was rewritten from here"})
}

// Pruning removes records, not links: the chain goes on verifying through
// them, and goes on from them once every record is pruned.
func TestPruningLeavesTheChainVerifiable(t *testing.T) {
	dsn := database(t)
	s := open(t, dsn)
	ctx := context.Background()
	// charge, refund, charge, charge, refund, charge: pruning charge leaves
	// runs 1, 3–4 and 6.
	for i, tool := range []string{"charge", "refund", "charge", "charge", "refund", "charge"} {
		a := finished(fmt.Sprintf("u-%d", i+1), 1, t0.Add(time.Duration(i)*time.Minute))
		a.Name, a.Spec.ToolRef.Name = fmt.Sprintf("k%d", i+1), tool
		if _, err := s.Keep(ctx, record(t, a), archive.Link{}); err != nil {
			t.Fatal(err)
		}
	}
	before := verify(t, s, "shop")
	charge := []archive.Cutoff{{Kind: v1alpha1.KindTool, Namespace: "shop", Name: "charge", Before: t0.Add(time.Hour)}}
	if n, err := s.Prune(ctx, charge); err != nil || n != 4 {
		t.Fatalf("Prune: %d, %v; want 4", n, err)
	}
	v := verify(t, s, "shop")
	if v.Broken != nil || v.Records != 2 || v.Pruned != 4 || v.Head != before.Head {
		t.Fatalf("after pruning: %+v, want 2 records, 4 pruned and the head %+v", v, before.Head)
	}
	if runs := query[string](t, dsn, `SELECT string_agg(first_seq || '-' || last_seq, ',' ORDER BY first_seq) FROM toolledger_chain_pruned`); runs != "1-1,3-4,6-6" {
		t.Errorf("pruned runs %s, want 1-1,3-4,6-6", runs)
	}
	refund := []archive.Cutoff{{Kind: v1alpha1.KindTool, Namespace: "shop", Name: "refund", Before: t0.Add(time.Hour)}}
	if n, err := s.Prune(ctx, refund); err != nil || n != 2 {
		t.Fatalf("Prune: %d, %v; want 2", n, err)
	}
	if runs := query[string](t, dsn, `SELECT string_agg(first_seq || '-' || last_seq, ',' ORDER BY first_seq) FROM toolledger_chain_pruned`); runs != "1-6" {
		t.Errorf("pruned runs %s, want the one run 1-6", runs)
	}
	keepInOrder(t, s, "shop", "k7")
	v = verify(t, s, "shop")
	if v.Broken != nil || v.Records != 1 || v.Pruned != 6 || v.Head.Sequence != 7 {
		t.Fatalf("a record kept after every other was pruned: %+v, want record 7 after the 6 pruned", v)
	}
	// A record deleted after the pruned run is still named.
	exec(t, dsn, `DELETE FROM toolledger_records WHERE key = 'k7'`)
	keepInOrder(t, s, "shop", "k8")
	wantBreak(t, verify(t, s, "shop"), archive.Break{Sequence: 7, Problem: "record 7 is missing: deleted, not pruned"})
}

func TestReplicasAppendingAtOnceKeepOneChain(t *testing.T) {
	dsn := database(t)
	s := open(t, dsn)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := finished(fmt.Sprintf("u-%02d", i), 1, t0)
			a.Name = fmt.Sprintf("k%02d", i)
			if _, err := s.Keep(context.Background(), record(t, a), archive.Link{}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if v := verify(t, s, "shop"); v.Broken != nil || v.Records != 16 || v.Head.Sequence != 16 {
		t.Fatalf("16 records kept at once: %+v", v)
	}
}

// Records archived before the archive had chains stay readable, outside
// the chain, which is counted and goes on without them.
func TestRecordsArchivedBeforeTheChainAreCounted(t *testing.T) {
	dsn := database(t)
	s := open(t, dsn)
	// As a manager older than the chain inserted it, before the append
	// trigger: a superuser turns triggers off to write it.
	exec(t, dsn, `SET session_replication_role = replica;
	INSERT INTO toolledger_records (uid, namespace, key, tool_kind, tool_name, idempotency_class, request_digest,
	phase, error_class, error_reason, external_ref, attempts, guards_key, completion_time, cause, deleted_by, deletion_time, action)
	VALUES ('legacy', 'shop', 'k0', 'Tool', 'charge', 'KeyProtected', 'sha256:0', 'Succeeded', '', '', 'ch_0', 1, true, now(), 'RecordRetention', '', now(),
		'{"metadata": {"creationTimestamp": "2026-12-02T12:00:00Z"}}')`)
	keepInOrder(t, s, "shop", "k1")
	if v := verify(t, s, "shop"); v.Broken != nil || v.Records != 1 || v.Unchained != 1 || v.Head.Sequence != 1 {
		t.Fatalf("%+v, want one chained record and one before the chain", v)
	}
	if got, err := guarding(s, context.Background(), namespaceOf("shop"), "k0"); err != nil || got == nil || got.Chain != (archive.Link{}) {
		t.Fatalf("the record before the chain: %+v, %v", got, err)
	}
	// Kept again, as by a replica that crashed before its etcd delete: it
	// is kept already, outside the chain, which it leaves as it was.
	legacy := finished("legacy", 1, t0)
	legacy.Name = "k0"
	if link, err := s.Keep(context.Background(), record(t, legacy), archive.Link{}); err != nil || link != (archive.Link{}) {
		t.Fatalf("the record before the chain kept again: link %+v, %v; want the zero link and no error", link, err)
	}
	if v := verify(t, s, "shop"); v.Broken != nil || v.Records != 1 || v.Unchained != 1 || v.Head.Sequence != 1 {
		t.Fatalf("%+v after the record before the chain was kept again", v)
	}
}

// A row inserted without a link after the namespace's chain started is
// named: the chain counts as "before the chain" only what was archived
// before it. The append trigger refuses such a row to every role; a
// superuser that turns triggers off can still write one.
func TestVerifyNamesARowInsertedOutsideTheChain(t *testing.T) {
	dsn := database(t)
	s := open(t, dsn)
	keepInOrder(t, s, "shop", "k1")
	forged := `INSERT INTO toolledger_records (uid, namespace, key, tool_kind, tool_name, idempotency_class, request_digest,
	phase, error_class, error_reason, external_ref, attempts, guards_key, completion_time, cause, deleted_by, deletion_time, action)
	VALUES ('forged', 'shop', 'k9', 'Tool', 'charge', 'KeyProtected', 'sha256:9', 'Succeeded', '', '', 'ch_9', 1, true, now(), 'RecordRetention', '', now(), '{}')`
	if err := execErr(dsn, forged); err == nil || !strings.Contains(err.Error(), "is not a link of its namespace's chain") {
		t.Fatalf("an unchained row as the schema's owner: %v, want the append trigger's refusal", err)
	}
	exec(t, dsn, `SET session_replication_role = replica; `+forged)
	wantBreak(t, verify(t, s, "shop"), archive.Break{Key: "k9", UID: "forged",
		Problem: "it was archived after the chain started, outside it: inserted by hand, or by a manager older than the chain"})
}

// Verification reads one snapshot: records kept and pruned meanwhile
// never show as a broken chain.
func TestVerifyWhileRecordsAreKeptAndPruned(t *testing.T) {
	dsn := database(t)
	s := open(t, dsn)
	ctx := context.Background()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer close(done)
		for i := range 300 {
			a := finished(fmt.Sprintf("u-%03d", i), 1, t0.Add(time.Duration(i)*time.Minute))
			a.Name = fmt.Sprintf("k%03d", i)
			if _, err := s.Keep(ctx, record(t, a), archive.Link{}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for cutoff := t0; ; cutoff = cutoff.Add(20 * time.Minute) {
			select {
			case <-done:
				return
			default:
			}
			if _, err := s.Prune(ctx, []archive.Cutoff{{Kind: v1alpha1.KindTool, Namespace: "shop", Name: "charge", Before: cutoff}}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	verified := 0
	for running := true; running; verified++ {
		select {
		case <-done:
			running = false
		default:
		}
		if v := verify(t, s, "shop"); v.Broken != nil {
			t.Fatalf("verification %d while keeping and pruning: broken at %+v", verified, *v.Broken)
		}
	}
	wg.Wait()
	if v := verify(t, s, "shop"); v.Broken != nil || v.Records+v.Pruned != 300 || v.Head.Sequence != 300 {
		t.Fatalf("at the end: %+v", v)
	}
	t.Logf("%d verifications while 300 records were kept and pruned", verified)
}

// A head copied earlier is held against the chain: the same hash at its
// sequence, else the chain was rewritten up to there.
func TestVerifyChecksAHeadCopiedEarlier(t *testing.T) {
	dsn := database(t)
	s := open(t, dsn)
	ctx := context.Background()
	keepInOrder(t, s, "shop", "k1", "k2", "k3", "k4", "k5")
	linkOf := func(key string) archive.Link {
		t.Helper()
		r, err := s.Read(ctx, namespaceOf("shop"), key)
		if err != nil || r == nil {
			t.Fatalf("%s: %v, %v", key, r, err)
		}
		return r.Chain
	}
	copied, fourth := linkOf("k3"), linkOf("k4")
	check := func(head archive.Link) *archive.Verification {
		t.Helper()
		v, err := s.Verify(ctx, "shop", archive.VerifyFrom{Copied: &head})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := check(copied); v.Broken != nil || v.Copied == nil || *v.Copied != (archive.CopiedHead{Link: copied, Result: archive.CopiedMatches}) {
		t.Fatalf("the copied head of an untouched chain: %+v", v)
	}
	// A chain rewritten consistently up to a copied head, the head kept
	// apart included, shows only against the copy.
	forged := archive.Link{Sequence: copied.Sequence, Hash: strings.Repeat("0", 64)}
	wantBreak(t, check(forged), archive.Break{Sequence: 3, Problem: "its hash is not the copied head's: the chain was rewritten up to here"})
	wantBreak(t, check(archive.Link{Sequence: 9, Hash: copied.Hash}), archive.Break{Sequence: 9,
		Problem: "the copied head is past the chain's head, record 5: records after it were deleted, and the head with them"})
	// Pruned inside a run, a head can no longer be compared; at a run's
	// end it can.
	if n, err := s.Prune(ctx, []archive.Cutoff{{Kind: v1alpha1.KindTool, Namespace: "shop", Name: "charge", Before: t0.Add(3*time.Hour + time.Minute)}}); err != nil || n != 4 {
		t.Fatalf("Prune: %d, %v; want 4", n, err)
	}
	if v := check(copied); v.Broken != nil || v.Copied == nil || v.Copied.Result != archive.CopiedPruned {
		t.Errorf("a copied head pruned inside a run: %+v", v)
	}
	if v := check(fourth); v.Broken != nil || v.Copied == nil || v.Copied.Result != archive.CopiedMatches {
		t.Errorf("a copied head at a pruned run's end: %+v", v)
	}
	wantBreak(t, check(archive.Link{Sequence: fourth.Sequence, Hash: copied.Hash}), archive.Break{Sequence: 4,
		Problem: "its hash is not the copied head's: the chain was rewritten up to here"})
}
