package archive_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/toolledger/toolledger/internal/archive"
	"github.com/toolledger/toolledger/internal/testenv"
)

// replicated starts a primary and a standby of it, the standby synchronous
// when sync, and returns both with a DSN that reaches whichever is primary.
func replicated(t *testing.T, sync bool) (primary, standby *testenv.Postgres, dsn string) {
	t.Helper()
	ctx := context.Background()
	primary, err := testenv.StartPostgres(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Stop() })
	if sync {
		if err := primary.Exec(ctx, `ALTER SYSTEM SET synchronous_standby_names = 'standby'`, `SELECT pg_reload_conf()`); err != nil {
			t.Fatal(err)
		}
	}
	standby, err = primary.StartStandby(ctx, "", "standby")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = standby.Stop() })
	state := "async"
	if sync {
		state = "sync"
	}
	if err := primary.WaitStreaming(ctx, "standby", state); err != nil {
		t.Fatal(err)
	}
	return primary, standby, testenv.FailoverDSN("postgres", primary, standby)
}

// keepN keeps n records of namespace shop, each against the mark of the
// one before, and returns the last link.
func keepN(t *testing.T, s *archive.Store, from, n int, mark archive.Link) archive.Link {
	t.Helper()
	for i := from; i < from+n; i++ {
		a := finished(fmt.Sprintf("u-%d", i), 1, t0)
		a.Name = fmt.Sprintf("order-%d", i)
		link, err := s.Keep(context.Background(), record(t, a), mark)
		if err != nil {
			t.Fatal(err)
		}
		mark = link
	}
	return mark
}

// A record kept on a primary with a synchronous standby is on the standby
// when Keep returns: the primary killed and the standby promoted, the
// archive holds every mark, and the key check answers every key.
func TestAFailoverToASynchronousStandbyLosesNoRecord(t *testing.T) {
	ctx := context.Background()
	primary, standby, dsn := replicated(t, true)
	s := open(t, dsn)
	replication, err := s.ReadReplication(ctx)
	if err != nil || !replication.SynchronousConfigured() || replication.Standbys != 1 || replication.Synchronous != 1 {
		t.Fatalf("replication %+v, %v; want one synchronous standby", replication, err)
	}
	mark := keepN(t, s, 0, 20, archive.Link{})
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	promoted := open(t, dsn)
	holdings, err := promoted.Holds(ctx, map[string]archive.Link{"shop": mark})
	if err != nil || !holdings["shop"].Held {
		t.Fatalf("the promoted standby and the mark of 20 records: %+v, %v; want held", holdings, err)
	}
	for i := range 20 {
		check, err := promoted.CheckKey(ctx, namespaceOf("shop"), fmt.Sprintf("order-%d", i), mark)
		if err != nil || check.Current == nil {
			t.Fatalf("key order-%d on the promoted standby: %+v, %v", i, check, err)
		}
	}
	keepN(t, promoted, 20, 1, mark)
}

// A standby that stopped receiving the WAL lacks what the primary kept
// since: promoted, it does not hold the mark of the records that left etcd
// meanwhile, and the key check and a keep say so (ErrBehind), though it
// keeps the archive's identity.
func TestAFailoverToAnAsynchronousStandbyThatLaggedIsBehindTheMark(t *testing.T) {
	ctx := context.Background()
	primary, standby, dsn := replicated(t, false)
	s := open(t, dsn)
	if replication, err := s.ReadReplication(ctx); err != nil || !replication.Asynchronous() {
		t.Fatalf("replication %+v, %v; want asynchronous", replication, err)
	}
	identity := s.Identity()
	mark := keepN(t, s, 0, 10, archive.Link{})
	if err := primary.WaitStreaming(ctx, "standby", "async"); err != nil {
		t.Fatal(err)
	}
	// Everything so far reached the standby; what follows does not.
	if err := standby.Exec(ctx, `SELECT pg_sleep(0.5)`); err != nil {
		t.Fatal(err)
	}
	if err := standby.StopStreaming(ctx); err != nil {
		t.Fatal(err)
	}
	mark = keepN(t, s, 10, 5, mark)
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	promoted := open(t, dsn)
	if promoted.Identity() != identity {
		t.Fatalf("the promoted standby is archive %s, want the same identity %s", promoted.Identity(), identity)
	}
	var behind *archive.BehindError
	if _, err := promoted.CheckKey(ctx, namespaceOf("shop"), "order-12", mark); !errors.As(err, &behind) || behind.Head.Sequence != 10 {
		t.Fatalf("a key kept after the standby stopped: %v, want behind at head 10", err)
	}
	if _, err := promoted.Keep(ctx, record(t, finished("u-99", 1, t0)), mark); !errors.Is(err, archive.ErrBehind) {
		t.Fatalf("keep on the promoted standby: %v, want ErrBehind", err)
	}
}
