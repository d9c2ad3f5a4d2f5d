package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/testenv"
)

// inProcess is a toolledger manager running in the harness's process, as
// the envtest suites run it (testenv.StartManager), with the options of a
// load run.
type inProcess struct {
	stop   func() error
	config managerConfig
}

// managerConfig is what a configuration changes in the in-process manager.
type managerConfig struct {
	Workers int
	// Events is the variant's events (variant.Events).
	Events string
	// ArchiveDSN is the archive's database (--archive-dsn); none when empty.
	ArchiveDSN string
	// RetentionRate is --retention-rate; the shipped default when zero.
	RetentionRate float64
	// ArchiveRecordRetention is --archive-record-retention; the shipped
	// default when zero.
	ArchiveRecordRetention time.Duration
}

// The manager's events besides the shipped default's (variant.Events).
const (
	// eventsEvery tells every action's happy path (--routine-event-rate=inf).
	eventsEvery = "every"
	// eventsWarnings tells warnings only (--routine-events=false).
	eventsWarnings = "warnings"
)

func (c managerConfig) routineEventRate() float64 {
	switch c.Events {
	case eventsEvery:
		return math.Inf(1)
	case eventsWarnings:
		return -1
	}
	return 0
}

func startInProcess(c *cluster, config managerConfig) (*inProcess, error) {
	opts := app.Options{
		ExecutorID:              fmt.Sprintf("bench-inprocess-w%d", config.Workers),
		MaxConcurrentReconciles: config.Workers,
		RoutineEventRate:        config.routineEventRate(),
		ArchiveDSN:              config.ArchiveDSN,
		RetentionRate:           config.RetentionRate,
		ArchiveRecordRetention:  config.ArchiveRecordRetention,
	}
	if config.ArchiveDSN != "" {
		// Each of the harness's databases is another archive, whose
		// managers bind a ledger of their own, in an operator namespace
		// of their own; one manager at a time needs no settling.
		sum := sha256.Sum256([]byte(config.ArchiveDSN))
		opts.Namespace, opts.ArchiveBindingSettle = "bench-ledger-"+hex.EncodeToString(sum[:4]), time.Millisecond
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: opts.Namespace}}
		if err := c.k8s.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("cannot create the operator namespace %s: %w", opts.Namespace, err)
		}
	}
	stop, err := testenv.StartManager(c.cfg, opts)
	if err != nil {
		return nil, err
	}
	return &inProcess{stop: stop, config: config}, nil
}

// managerProcess is cmd/manager running as its own OS process, so that it
// can be killed for real and its memory read apart from the harness's.
type managerProcess struct {
	// executorID is its --executor-id, when the harness gave one.
	executorID string
	cmd        *exec.Cmd
	done       chan error
	metricsURL string
	logPath    string
}

// buildManager compiles ./cmd/manager into dir.
func buildManager(ctx context.Context, root, dir string) (string, error) {
	bin := filepath.Join(dir, "manager")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/manager")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("cannot build ./cmd/manager: %w\n%s", err, out)
	}
	return bin, nil
}

// startManagerProcess runs bin against the kubeconfig with its metrics and
// probes on free loopback ports; extra flags follow. Its output goes to
// logPath. The process dies with the harness (Pdeathsig).
//
// The probes take a port the kernel chooses (nothing reads them). The
// metrics, which the harness scrapes, cannot say which port they took, so
// one is picked free and handed to the manager; another program may take
// it meanwhile, and the manager then exits: such a start is tried again on
// another port, a few times.
func startManagerProcess(ctx context.Context, bin, kubeconfig, logPath string, extra ...string) (*managerProcess, error) {
	for attempt := 1; ; attempt++ {
		p, err := startManagerOnce(ctx, bin, kubeconfig, logPath, extra...)
		if !errors.Is(err, errPortTaken) || attempt == 5 {
			return p, err
		}
	}
}

// errPortTaken is a manager's exit at start because another program
// listens on the port it was given.
var errPortTaken = errors.New("its metrics port was taken")

func startManagerOnce(ctx context.Context, bin, kubeconfig, logPath string, extra ...string) (*managerProcess, error) {
	metricsAddr, err := testenv.FreeLocalAddr()
	if err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	// Where this start's lines begin.
	logStart, err := logFile.Seek(0, io.SeekEnd)
	if err != nil {
		_ = logFile.Close()
		return nil, err
	}
	args := append([]string{
		"--metrics-bind-address=" + metricsAddr,
		// The harness scrapes without a token.
		"--metrics-secure=false",
		"--health-probe-bind-address=127.0.0.1:0",
		"--operator-namespace=toolledger-system",
		// The benchmark's downstreams listen on 127.0.0.1.
		"--egress-allow=127.0.0.1/32",
	}, extra...)
	// Not CommandContext: the harness decides when the process ends, by
	// signal, and waits for it.
	cmd := exec.Command(bin, args...) //nolint:noctx // ended explicitly by stop/kill
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("cannot start %s: %w", bin, err)
	}
	p := &managerProcess{cmd: cmd, done: make(chan error, 1), metricsURL: "http://" + metricsAddr + "/metrics", logPath: logPath}
	for _, arg := range extra {
		if id, ok := strings.CutPrefix(arg, "--executor-id="); ok {
			p.executorID = id
		}
	}
	go func() {
		p.done <- cmd.Wait()
		_ = logFile.Close()
	}()
	// Ready once it has said that its metrics listen (controller-runtime
	// does once it holds the port, so the answer is its own) and they answer.
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		select {
		case err := <-p.done:
			p.done <- err
			if strings.Contains(logSince(logPath, logStart), "address already in use") {
				err = fmt.Errorf("%w: %w", errPortTaken, err)
			}
			return nil, fmt.Errorf("the manager exited at start, see %s: %w", logPath, err)
		case <-ctx.Done():
			p.kill()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if !strings.Contains(logSince(logPath, logStart), "Serving metrics server") {
			continue
		}
		if _, err := scrapeHTTP(ctx, p.metricsURL); err == nil {
			return p, nil
		}
	}
	p.kill()
	return nil, fmt.Errorf("the manager's metrics did not answer within a minute; see %s", logPath)
}

// logSince is what the log at path holds from offset on.
func logSince(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

func (p *managerProcess) pid() string { return strconv.Itoa(p.cmd.Process.Pid) }

// kill ends the process with SIGKILL, as a crash or an OOM kill would, and
// waits for it.
func (p *managerProcess) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	err := <-p.done
	p.done <- err
}

// stop asks the process to shut down (SIGTERM) and kills it after 15s.
func (p *managerProcess) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
	case <-time.After(15 * time.Second):
		p.kill()
	}
}

func (p *managerProcess) metrics(ctx context.Context) (metrics, error) {
	return scrapeHTTP(ctx, p.metricsURL)
}
