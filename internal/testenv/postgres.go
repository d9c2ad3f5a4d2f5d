package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// unprivilegedUID is the user a PostgreSQL server runs as when this process
// is root, which the server refuses to run as: nobody.
const unprivilegedUID = 65534

// Postgres is a PostgreSQL server of the machine's binaries (Debian's
// postgresql package), for the archive's tests and the local runner: its
// data in a directory of its own, bound to 127.0.0.1 only, without fsync
// (nothing in it must survive the machine).
type Postgres struct {
	// DSN connects to its database "postgres" as the superuser "toolledger".
	DSN string
	// Dir holds the data and the server's log (postgres.log).
	Dir        string
	bin        string
	credential *syscall.Credential
	cmd        *exec.Cmd
	port       int
	exit       chan error
	// host is the address the server listens on; clients, when valid, the
	// network whose programs log in with a password (PostgresOn).
	host    string
	clients netip.Prefix
	// settings are the server's -c settings beyond the test defaults
	// (PostgresSetting).
	settings []string
}

// PostgresOption changes how a server is started.
type PostgresOption func(*Postgres)

// PostgresOn has the server listen on host (an address of this machine)
// instead of 127.0.0.1, trust the superuser from host itself, and let
// programs of the network clients log in with a password: a database
// beside a cluster, which pods reach.
func PostgresOn(host string, clients netip.Prefix) PostgresOption {
	return func(p *Postgres) { p.host, p.clients = host, clients }
}

// PostgresSetting starts the server with a setting of its command line,
// which outranks its configuration files (ALTER SYSTEM's included).
func PostgresSetting(name, value string) PostgresOption {
	return func(p *Postgres) { p.settings = append(p.settings, "-c", name+"="+value) }
}

// PostgresBinDir is where initdb and postgres are: pg_config's bindir, else
// the last of Debian's /usr/lib/postgresql/*/bin.
func PostgresBinDir() (string, error) {
	if out, err := exec.CommandContext(context.Background(), "pg_config", "--bindir").Output(); err == nil {
		dir := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "postgres")); err == nil {
			return dirs[i], nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries (initdb, postgres) found: install Debian's postgresql package (make test does)")
}

// StartPostgres initialises a cluster in a new directory under parent (the
// system's temporary directory when empty) and starts its server on a free
// port of 127.0.0.1. Stop stops it and removes the directory.
func StartPostgres(ctx context.Context, parent string, opts ...PostgresOption) (*Postgres, error) {
	dir, err := os.MkdirTemp(parent, "toolledger-postgres-")
	if err != nil {
		return nil, err
	}
	p, err := RunPostgres(ctx, dir, opts...)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return p, nil
}

// RunPostgres starts a server on a free port of 127.0.0.1 on the cluster in
// dir, which it initialises on first use: its data outlives Halt, for the
// local runner, whose ledger survives a restart.
func RunPostgres(ctx context.Context, dir string, opts ...PostgresOption) (*Postgres, error) {
	bin, err := PostgresBinDir()
	if err != nil {
		return nil, err
	}
	p := &Postgres{Dir: dir, bin: bin, host: "127.0.0.1"}
	for _, opt := range opts {
		opt(p)
	}
	if p.credential, err = p.ownDir(); err != nil {
		return nil, err
	}
	if err := PostgresCanEnter(dir); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		if err := p.initialise(ctx); err != nil {
			return nil, err
		}
	}
	// The server cannot be told to choose a port and say which, so one is
	// picked free and handed to it; another program may take it meanwhile,
	// and the server then exits. A start on a taken port is tried again on
	// another, a few times.
	for attempt := 1; ; attempt++ {
		if p.port, err = freePort(); err != nil {
			return nil, err
		}
		p.DSN = fmt.Sprintf("postgres://toolledger@%s/postgres?sslmode=disable", net.JoinHostPort(p.host, strconv.Itoa(p.port)))
		err = p.serve(ctx)
		if err == nil {
			return p, nil
		}
		if halted := p.Halt(); !errors.Is(err, errPortTaken) || attempt == portAttempts {
			return nil, errors.Join(err, halted)
		}
	}
}

// portAttempts bounds the starts of a server on a port picked free, each
// on another port, when the port was taken before the server listened.
const portAttempts = 5

// errPortTaken is a server's exit because another program listens on the
// port it was given.
var errPortTaken = errors.New("its port was taken")

// PostgresCanEnter checks that the server's user can enter dir, as initdb
// and the server must: when this process is root, that is nobody, whom a
// directory above dir closed to other users (a home directory, or one made
// by mktemp -d) stops. It runs the server's binary as that user in dir,
// named from the root: a relative name would be entered from this
// process's directory, past the closed one above it.
func PostgresCanEnter(dir string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	bin, err := PostgresBinDir()
	if err != nil {
		return err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return err
	}
	probe := exec.CommandContext(context.Background(), filepath.Join(bin, "postgres"), "--version")
	probe.Dir = dir
	probe.SysProcAttr = &syscall.SysProcAttr{Credential: unprivileged}
	if out, err := probe.CombinedOutput(); err != nil {
		return fmt.Errorf("PostgreSQL refuses to run as root, so it runs as nobody, who cannot enter %s (%w%s): "+
			"a directory above it is closed to other users; run as an ordinary user, or keep the data where other users can enter (TMPDIR for the tests)",
			dir, err, out)
	}
	return nil
}

// initialise creates the cluster: trust authentication, for a server bound
// to 127.0.0.1 of a test or a developer's machine only.
func (p *Postgres) initialise(ctx context.Context) error {
	initdb := exec.CommandContext(ctx, filepath.Join(p.bin, "initdb"), "-D", filepath.Join(p.Dir, "data"), "-U", "toolledger", "-A", "trust",
		"-E", "UTF8", "--locale=C", "--no-sync")
	// In the data's directory: initdb returns to its working directory
	// after looking for its own, which nobody may not be able to enter.
	initdb.Dir = p.Dir
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: p.credential}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w: %s", err, out)
	}
	if !p.clients.IsValid() {
		return nil
	}
	hba, err := os.OpenFile(filepath.Join(p.Dir, "data", "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(hba, "host all toolledger %s/32 trust\nhost all all %s scram-sha-256\n", p.host, p.clients)
	return errors.Join(err, hba.Close())
}

// serve starts the server on the cluster and waits until it answers.
func (p *Postgres) serve(ctx context.Context) error {
	logFile, err := os.OpenFile(filepath.Join(p.Dir, "postgres.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	// Where this start's lines begin, to read why it failed.
	logStart, err := logFile.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	// Not bound to ctx: the server outlives its start; Halt stops it.
	args := append([]string{"-D", filepath.Join(p.Dir, "data"), "-h", p.host, "-p", strconv.Itoa(p.port),
		"-k", p.Dir, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"}, p.settings...)
	p.cmd = exec.Command(filepath.Join(p.bin, "postgres"), args...) //nolint:noctx
	p.cmd.Dir = p.Dir                                               // as initdb's
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	// Its own process group: an interrupt of the test run reaches the
	// test, which stops the server, not the server first.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.credential, Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("cannot start postgres: %w", err)
	}
	p.exit = make(chan error, 1)
	go func() { p.exit <- p.cmd.Wait() }()
	return p.waitReady(ctx, logStart)
}

// ownDir hands the directory to the unprivileged user when this process is
// root, and returns the credential to run the server's commands with (nil:
// as this process).
func (p *Postgres) ownDir() (*syscall.Credential, error) {
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, nil
	}
	if err := os.Chown(p.Dir, unprivilegedUID, unprivilegedUID); err != nil {
		return nil, fmt.Errorf("cannot hand %s to the unprivileged user: %w", p.Dir, err)
	}
	return unprivileged, nil
}

// unprivileged runs a command as nobody.
var unprivileged = &syscall.Credential{Uid: unprivilegedUID, Gid: unprivilegedUID, NoSetGroups: true}

// waitReady waits until the server answers; the log from logStart on says
// why it exited, if it did.
func (p *Postgres) waitReady(ctx context.Context, logStart int64) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, p.DSN)
		if err == nil {
			return conn.Close(ctx)
		}
		select {
		case exitErr := <-p.exit:
			p.exit <- exitErr
			log, _ := os.ReadFile(filepath.Join(p.Dir, "postgres.log"))
			log = log[min(logStart, int64(len(log))):]
			if strings.Contains(string(log), "Address already in use") {
				exitErr = fmt.Errorf("%w: %w", errPortTaken, exitErr)
			}
			return fmt.Errorf("postgres exited (%w): %s", exitErr, log)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres did not accept connections within 30s: %w", err)
		}
	}
}

// Database creates a database of its own for one test and returns its DSN.
func (p *Postgres) Database(ctx context.Context, name string) (string, error) {
	conn, err := pgx.Connect(ctx, p.DSN)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("cannot create database %s: %w", name, err)
	}
	return fmt.Sprintf("postgres://toolledger@%s/%s?sslmode=disable", net.JoinHostPort(p.host, strconv.Itoa(p.port)), name), nil
}

// Stop stops the server (a fast shutdown) and removes its directory.
func (p *Postgres) Stop() error {
	return errors.Join(p.Halt(), os.RemoveAll(p.Dir))
}

// Halt stops the server, keeping its data: Resume starts it again. It
// returns how the server exited; one killed after 30s is an error.
func (p *Postgres) Halt() error {
	if p.cmd == nil || p.cmd.Process == nil {
		return nil
	}
	defer func() { p.cmd = nil }()
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("cannot stop postgres: %w", err)
	}
	select {
	case err := <-p.exit:
		return err
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		return fmt.Errorf("postgres did not stop within 30s of SIGINT, killed: %w", <-p.exit)
	}
}

// PID is the server's process id, which is also its process group's; 0
// while it is halted.
func (p *Postgres) PID() int {
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Resume starts a halted server again, on the same port and data: its
// clients hold its DSN. Should another program have taken the port while
// it was halted, Resume fails and its error says so.
func (p *Postgres) Resume(ctx context.Context) error {
	if p.cmd != nil {
		return errors.New("postgres is running")
	}
	return p.serve(ctx)
}

// freePort is a TCP port of 127.0.0.1 that nothing listens on now.
func freePort() (int, error) {
	addr, err := FreeLocalAddr()
	if err != nil {
		return 0, err
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(port)
}
