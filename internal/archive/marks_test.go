package archive_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/toolledger/toolledger/internal/archive"
)

// restoreCopy copies the database at dsn as it is now into a new database,
// as a backup restored later would be (CREATE DATABASE … TEMPLATE takes a
// copy of every row, the archive's identity included), and returns the
// copy's DSN. No other session may use dsn meanwhile.
func restoreCopy(t *testing.T, dsn, name string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, server.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	source := dsn[strings.LastIndex(dsn, "/")+1 : strings.Index(dsn, "?")]
	if _, err := conn.Exec(ctx, fmt.Sprintf(`CREATE DATABASE %s TEMPLATE %s`, pgx.Identifier{name}.Sanitize(), pgx.Identifier{source}.Sanitize())); err != nil {
		t.Fatal(err)
	}
	return strings.Replace(dsn, "/"+source+"?", "/"+name+"?", 1)
}

// A database restored from a backup keeps the archive's identity and lacks
// the records kept since: the mark the cluster took of the namespace's chain
// when the newest of them left etcd is not in it. The key check and a keep
// refuse it (ErrBehind), whatever the key, until the mark is held again;
// records kept into the restored chain meanwhile (from a stale mark) do not
// make it hold the mark.
func TestAnArchiveRestoredBehindItsMarkIsRefused(t *testing.T) {
	ctx := context.Background()
	dsn := database(t)
	s := open(t, dsn)
	keepAt := func(s *archive.Store, key string, mark archive.Link) (archive.Link, error) {
		a := finished("u-"+key, 1, t0)
		a.Name = key
		return s.Keep(ctx, record(t, a), mark)
	}
	var mark archive.Link
	for i := range 2 {
		link, err := keepAt(s, fmt.Sprintf("order-%d", i), mark)
		if err != nil {
			t.Fatal(err)
		}
		mark = link
	}
	identity := s.Identity()
	s.Close()
	backup := restoreCopy(t, dsn, "restored_behind")
	s = open(t, dsn)
	for i := 2; i < 5; i++ {
		link, err := keepAt(s, fmt.Sprintf("order-%d", i), mark)
		if err != nil {
			t.Fatal(err)
		}
		mark = link
	}
	if mark.Sequence != 5 {
		t.Fatalf("mark %+v, want the fifth link", mark)
	}

	restored := open(t, backup)
	if restored.Identity() != identity {
		t.Fatalf("the restored copy's identity %s, want the archive's %s", restored.Identity(), identity)
	}
	shop := namespaceOf("shop")
	var behind *archive.BehindError
	_, err := restored.CheckKey(ctx, shop, "order-3", mark)
	if !errors.As(err, &behind) || behind.Head.Sequence != 2 || behind.Mark != mark {
		t.Fatalf("key check of a key kept after the backup: %v, want a BehindError at head 2 against mark 5", err)
	}
	if errors.Is(err, archive.ErrUnavailable) {
		t.Errorf("a behind archive reads as unavailable: %v", err)
	}
	if _, err := restored.CheckKey(ctx, shop, "order-0", mark); !errors.Is(err, archive.ErrBehind) {
		t.Errorf("key check of a key the backup holds: %v, want ErrBehind: the archive as a whole lost records of the namespace", err)
	}
	if _, err := keepAt(restored, "order-9", mark); !errors.Is(err, archive.ErrBehind) {
		t.Fatalf("keep against mark 5: %v, want ErrBehind", err)
	}
	if n := query[int](t, backup, `SELECT count(*) FROM toolledger_records`); n != 2 {
		t.Errorf("the restored archive holds %d records after a refused keep, want 2", n)
	}

	// A replica whose cache still had an older mark appends three records:
	// the chain reaches sequence 5 again, with other records.
	older := archive.Link{Sequence: 2, Hash: behind.Head.Hash}
	for _, key := range []string{"order-7", "order-8", "order-9"} {
		if _, err := keepAt(restored, key, older); err != nil {
			t.Fatal(err)
		}
	}
	holdings, err := restored.Holds(ctx, map[string]archive.Link{"shop": mark, "other": {Sequence: 1, Hash: "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if h := holdings["shop"]; h.Held || h.Head.Sequence != 5 {
		t.Errorf("the forked chain at sequence 5: %+v, want not held", h)
	}
	if h := holdings["other"]; h.Held || h.Head.Sequence != 0 {
		t.Errorf("a namespace the restored archive has no chain of: %+v, want not held", h)
	}
	if _, err := restored.CheckKey(ctx, shop, "order-4", mark); !errors.Is(err, archive.ErrBehind) {
		t.Errorf("key check on the forked chain: %v, want ErrBehind", err)
	}

	// The archive itself still holds its mark, and every earlier one.
	holdings, err = s.Holds(ctx, map[string]archive.Link{"shop": mark})
	if err != nil || !holdings["shop"].Held {
		t.Fatalf("the archive's own mark: %+v, %v; want held", holdings, err)
	}
	for _, m := range []archive.Link{mark, older, {}} {
		if _, err := s.CheckKey(ctx, shop, "order-3", m); err != nil {
			t.Errorf("key check against mark %+v: %v", m, err)
		}
	}
}

// A keep repeated after a crash returns the link it was kept at, and waits
// for the standbys like a new one.
func TestKeepingARecordAgainReturnsItsLink(t *testing.T) {
	ctx := context.Background()
	s := open(t, database(t))
	r := record(t, finished("u-1", 1, t0))
	first, err := s.Keep(ctx, r, archive.Link{})
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.Keep(ctx, r, first)
	if err != nil || again != first || first.Sequence != 1 {
		t.Fatalf("kept again: %+v, %v; want %+v", again, err, first)
	}
}

// The key check reads each life of a namespace's name apart: the records of
// an earlier namespace of the name come back as earlier lives, newest first,
// each named by its uid, never as the current one's.
func TestTheKeyCheckTellsTheLivesOfANamespaceApart(t *testing.T) {
	ctx := context.Background()
	s := open(t, database(t))
	lives := []archive.Namespace{
		{Name: "shop", UID: "shop-1", Created: t0.Add(-96 * time.Hour)},
		{Name: "shop", UID: "shop-2", Created: t0.Add(-48 * time.Hour)},
		{Name: "shop", UID: "shop-3", Created: t0.Add(-time.Hour)},
	}
	for i, life := range lives[:2] {
		a := finished(fmt.Sprintf("u-%d", i), 1, life.Created.Add(time.Hour))
		r, err := archive.NewRecord(a, life.UID, nil, "Deleted", "", life.Created.Add(2*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Keep(ctx, r, archive.Link{}); err != nil {
			t.Fatal(err)
		}
	}
	check, err := s.CheckKey(ctx, lives[2], "order-1", archive.Link{})
	if err != nil {
		t.Fatal(err)
	}
	if check.Current != nil || len(check.Earlier) != 2 || check.Earlier[0].NamespaceUID != "shop-2" || check.Earlier[1].NamespaceUID != "shop-1" {
		t.Fatalf("the third life's check: current %v, earlier %v; want none, and shop-2 then shop-1", check.Current, check.Earlier)
	}
	check, err = s.CheckKey(ctx, lives[1], "order-1", archive.Link{})
	if err != nil || check.Current == nil || check.Current.UID != "u-1" || len(check.Earlier) != 1 || check.Earlier[0].UID != "u-0" {
		t.Fatalf("the second life's check: %+v, %v", check, err)
	}
}
