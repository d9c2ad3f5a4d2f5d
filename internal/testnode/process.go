package testnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is a component the node started, recorded in run/NAME.pid with
// its command line, so that a teardown after a killed suite stops that
// process and no other that took its pid since.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// start runs argv as the component name, its output in logs/NAME.log.
func (c *Cluster) start(name string, argv ...string) error {
	logFile, err := os.OpenFile(c.path("logs", name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	// Not bound to a context: the component outlives the step that starts
	// it; stop ends it.
	cmd := exec.Command(argv[0], argv[1:]...) //nolint:gosec,noctx // the node's own components
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Dir = c.cfg.StateDir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("cannot start %s: %w", name, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	record := strconv.Itoa(cmd.Process.Pid) + "\n" + strings.Join(argv, "\x00")
	c.procs[name] = p
	return os.WriteFile(c.path("run", name+".pid"), []byte(record), 0o600)
}

// exited reports, with the end of its log, that the component stopped.
func (c *Cluster) exited(name string) error {
	log, _ := os.ReadFile(c.path("logs", name+".log"))
	if len(log) > 4000 {
		log = log[len(log)-4000:]
	}
	return fmt.Errorf("%s exited; the end of %s:\n%s", name, c.path("logs", name+".log"), log)
}

// waitFor polls ready until it holds, the component exits, or timeout.
func (c *Cluster) waitFor(ctx context.Context, name string, timeout time.Duration, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	p := c.procs[name]
	var last error
	for {
		if last = ready(ctx); last == nil {
			return nil
		}
		select {
		case <-p.done:
			return c.exited(name)
		case <-ctx.Done():
			return fmt.Errorf("%s was not ready within %s: %w", name, timeout, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// stop ends the component name: SIGTERM, then SIGKILL after grace. A
// component of an earlier suite (no process here) is found by its pid file.
func (c *Cluster) stop(name string, grace time.Duration) error {
	pidFile := c.path("run", name+".pid")
	if p, ok := c.procs[name]; ok {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
		delete(c.procs, name)
		return removeIfExists(pidFile)
	}
	record, err := os.ReadFile(pidFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	pidLine, argv, _ := strings.Cut(string(record), "\n")
	pid, err := strconv.Atoi(pidLine)
	if err != nil {
		return fmt.Errorf("%s: %w", pidFile, err)
	}
	if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && string(bytes.TrimSuffix(cmdline, []byte{0})) == argv {
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		deadline := time.Now().Add(grace)
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		for alive(pid) {
			time.Sleep(100 * time.Millisecond)
		}
	}
	return removeIfExists(pidFile)
}

func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	// A zombie (state Z) is gone for what matters here.
	return err == nil && !bytes.Contains(stat, []byte(") Z "))
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// run runs a command of the machine to its end, with its output in the
// error when it fails.
func run(ctx context.Context, argv ...string) error {
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput() //nolint:gosec // the node's own commands
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// output runs a command of the machine and returns its output.
func output(ctx context.Context, argv ...string) (string, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...) //nolint:gosec // the node's own commands
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return string(out), nil
}

func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o600)
}
