package archive_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/toolledger/toolledger/internal/archive"
	"github.com/toolledger/toolledger/internal/testenv"
)

// setSystem changes a setting of the whole server at dsn and reloads it.
func setSystem(t *testing.T, dsn, name, value string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `ALTER SYSTEM SET `+pgx.Identifier{name}.Sanitize()+` = '`+value+`'`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		t.Fatal(err)
	}
	// The reload reaches the sessions at their next statement.
	time.Sleep(200 * time.Millisecond)
}

// A keep returns only once its record is durable where a failover lands:
// on a server whose commits wait for a synchronous standby that does not
// answer, a keep given up is ErrNotDurable (the record stays in etcd),
// though the server committed it alone; kept again once the standby
// answers, it waits for the standby like a new one. A manager that
// requires a synchronous standby keeps nothing on a server without one.
func TestAKeepReturnsOnlyOnceDurableOnTheSynchronousStandbys(t *testing.T) {
	ctx := context.Background()
	pg, err := testenv.StartPostgres(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	s := open(t, pg.DSN)
	replication, err := s.ReadReplication(ctx)
	if err != nil || replication.SynchronousConfigured() || replication.Asynchronous() || replication.Standbys != 0 {
		t.Fatalf("a server alone: %+v, %v", replication, err)
	}

	setSystem(t, pg.DSN, "synchronous_standby_names", "never_comes")
	replication, err = s.ReadReplication(ctx)
	if err != nil || !replication.SynchronousConfigured() {
		t.Fatalf("a server whose commits wait for a standby: %+v, %v", replication, err)
	}
	r := record(t, finished("u-1", 1, t0))
	// The server's statement timeout, or an administrator, cancels the
	// commit's wait: the server commits alone and says so in a warning,
	// beside a commit that succeeds.
	kept := make(chan error, 1)
	go func() {
		_, err := s.Keep(ctx, r, archive.Link{})
		kept <- err
	}()
	cancelSyncWait(t, pg.DSN)
	if err := <-kept; !errors.Is(err, archive.ErrNotDurable) {
		t.Fatalf("a keep whose commit's wait for the standby was cancelled: %v, want ErrNotDurable", err)
	}
	if n := query[int](t, pg.DSN, `SELECT count(*) FROM toolledger_records`); n != 1 {
		t.Fatalf("the server holds %d records; the keep committed on it alone, want 1", n)
	}
	// Kept again, the standby still silent, until the keep gives up: it
	// waits for the standby like a new one.
	waited, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := s.Keep(waited, r, archive.Link{}); err == nil {
		t.Fatal("the record kept again while no standby confirms: nil, want an error")
	}

	setSystem(t, pg.DSN, "synchronous_standby_names", "")
	link, err := s.Keep(ctx, r, archive.Link{})
	if err != nil || link.Sequence != 1 {
		t.Fatalf("kept again once no standby is waited for: %+v, %v", link, err)
	}

	strict, err := archive.Open(ctx, pg.DSN, archive.RequireSynchronousStandby())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(strict.Close)
	other := record(t, finished("u-2", 1, t0))
	other.Key = "order-2"
	if _, err := strict.Keep(ctx, other, link); !errors.Is(err, archive.ErrNotDurable) {
		t.Fatalf("a keep that requires a synchronous standby, on a server without one: %v, want ErrNotDurable", err)
	}
	if n := query[int](t, pg.DSN, `SELECT count(*) FROM toolledger_records`); n != 1 {
		t.Errorf("the server holds %d records after the refused keep, want 1", n)
	}
}

// cancelSyncWait cancels the session of dsn's server that waits for a
// synchronous standby, once one does.
func cancelSyncWait(t *testing.T, dsn string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var cancelled bool
		err := conn.QueryRow(ctx, `SELECT coalesce(bool_or(pg_cancel_backend(pid)), false) FROM pg_stat_activity WHERE wait_event = 'SyncRep'`).Scan(&cancelled)
		if err != nil {
			t.Fatal(err)
		}
		if cancelled {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no session waited for a synchronous standby within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
