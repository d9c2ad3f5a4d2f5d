package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// A primary and its standbys, as Debian's PostgreSQL replicates: a standby
// made with pg_basebackup streams the primary's WAL, synchronously when the
// primary names it in synchronous_standby_names. The archive's end-to-end
// scenarios fail over to one and restore from a base backup.

// StartStandby makes a standby of p named name (its application_name, which
// synchronous_standby_names may list) with pg_basebackup, in a new directory
// under parent, and starts it on a free port of 127.0.0.1, streaming p's
// WAL. opts change its start; its own synchronous_standby_names is empty
// until set, so that promoted it waits for no standby.
func (p *Postgres) StartStandby(ctx context.Context, parent, name string, opts ...PostgresOption) (*Postgres, error) {
	dir, err := os.MkdirTemp(parent, "toolledger-standby-")
	if err != nil {
		return nil, err
	}
	s := &Postgres{Dir: dir, bin: p.bin, host: "127.0.0.1"}
	if s.credential, err = s.ownDir(); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	if err := s.baseBackupOf(ctx, p, filepath.Join(dir, "data"), "-R", "-d", p.conninfo(name)); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	opts = append([]PostgresOption{PostgresSetting("synchronous_standby_names", "")}, opts...)
	standby, err := RunPostgres(ctx, dir, opts...)
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	return standby, nil
}

// conninfo is a libpq connection string to p, as application name.
func (p *Postgres) conninfo(name string) string {
	return fmt.Sprintf("host=%s port=%d user=toolledger application_name=%s", p.host, p.port, name)
}

// BaseBackup takes a base backup of p, its WAL to the backup's end
// included, into a new directory under parent, and returns the directory:
// what RestoreBaseBackup restores.
func (p *Postgres) BaseBackup(ctx context.Context, parent string) (string, error) {
	dir, err := os.MkdirTemp(parent, "toolledger-backup-")
	if err != nil {
		return "", err
	}
	backup := &Postgres{Dir: dir, bin: p.bin}
	if backup.credential, err = backup.ownDir(); err != nil {
		return "", err
	}
	if err := backup.baseBackupOf(ctx, p, filepath.Join(dir, "data"), "-d", p.conninfo("backup")); err != nil {
		return "", errors.Join(err, os.RemoveAll(dir))
	}
	return dir, nil
}

// baseBackupOf runs pg_basebackup of p into data, as the server's user.
func (p *Postgres) baseBackupOf(ctx context.Context, of *Postgres, data string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(p.bin, "pg_basebackup"), append([]string{"-D", data, "-X", "stream", "--no-sync"}, args...)...)
	cmd.Dir = p.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.credential}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pg_basebackup of %s: %w: %s", net.JoinHostPort(of.host, strconv.Itoa(of.port)), err, out)
	}
	return nil
}

// RestoreBaseBackup restores the base backup in backup (BaseBackup's) in
// place of p's data, as an operator restores a database from its backup:
// the server is stopped, its data replaced, and started again on its port,
// where it recovers to the backup's end and serves as a primary.
func (p *Postgres) RestoreBaseBackup(ctx context.Context, backup string) error {
	if err := p.Halt(); err != nil {
		return err
	}
	data := filepath.Join(p.Dir, "data")
	if err := os.RemoveAll(data); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(backup, "data"), data); err != nil {
		return err
	}
	return p.Resume(ctx)
}

// Kill kills the server and its backends at once (SIGKILL to its process
// group), as a crash of its machine would, and waits until it is gone; its
// data stay.
func (p *Postgres) Kill() error {
	if p.cmd == nil || p.cmd.Process == nil {
		return nil
	}
	defer func() { p.cmd = nil }()
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("cannot kill postgres: %w", err)
	}
	if err := <-p.exit; err != nil && !strings.Contains(err.Error(), "killed") {
		return fmt.Errorf("postgres exited other than by its SIGKILL: %w", err)
	}
	return nil
}

// Promote ends a standby's recovery: it serves as a primary, with what it
// received of the WAL.
func (p *Postgres) Promote(ctx context.Context) error {
	var promoted bool
	if err := p.queryRow(ctx, `SELECT pg_promote(true, 60)`, &promoted); err != nil || !promoted {
		return fmt.Errorf("cannot promote the standby (promoted %t): %w", promoted, err)
	}
	return nil
}

// StopStreaming has a standby stop receiving its primary's WAL, as a
// standby that lags far behind, or whose network to the primary is cut:
// what the primary commits from then on, it lacks.
func (p *Postgres) StopStreaming(ctx context.Context) error {
	if err := p.Exec(ctx, `ALTER SYSTEM SET primary_conninfo = ''`, `SELECT pg_reload_conf()`); err != nil {
		return err
	}
	// The WAL receiver stops once the reload reaches the startup process.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var receiving bool
		if err := p.queryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_wal_receiver)`, &receiving); err != nil {
			return err
		}
		if !receiving {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the standby still receives its primary's WAL 30s after primary_conninfo was cleared")
		}
		if err := Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// WaitStreaming waits until a standby streams from its primary, and its
// primary reports it as state (sync, async).
func (p *Postgres) WaitStreaming(ctx context.Context, standby, state string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var got string
		err := p.queryRow(ctx, `SELECT coalesce((SELECT sync_state FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'), '')`, &got, standby)
		if err != nil {
			return err
		}
		if got == state {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("standby %s is not streaming %s 30s after it started (primary reports %q)", standby, state, got)
		}
		if err := Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// Exec runs statements on the server's database postgres, as its superuser.
func (p *Postgres) Exec(ctx context.Context, statements ...string) error {
	conn, err := pgx.Connect(ctx, p.DSN)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	for _, sql := range statements {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
	}
	return nil
}

func (p *Postgres) queryRow(ctx context.Context, sql string, into any, args ...any) error {
	conn, err := pgx.Connect(ctx, p.DSN)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.QueryRow(ctx, sql, args...).Scan(into)
}

// Port is the port the server listens on.
func (p *Postgres) Port() int { return p.port }

// FailoverDSN connects to database of whichever of servers serves as the
// primary: libpq's (and pgx's) list of hosts, each tried in turn for a
// session that may write, as a client of a replicated database is told.
func FailoverDSN(database string, servers ...*Postgres) string {
	hosts := ""
	for i, s := range servers {
		if i > 0 {
			hosts += ","
		}
		hosts += net.JoinHostPort(s.host, strconv.Itoa(s.port))
	}
	return fmt.Sprintf("postgres://toolledger@%s/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=2", hosts, database)
}
