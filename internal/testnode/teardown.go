package testnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Down tears the node down and leaves the machine as it found it: pods
// are stopped while the kubelet runs (so that the CNI plugin frees their
// addresses and links), then every component, the containers that remain,
// the cgroups, the bridge, the rules and the state directory; the
// tunables are restored. It is safe to call on a node that is half up, or
// on what a killed suite left.
func (c *Cluster) Down(ctx context.Context) error {
	var errs []error
	if _, ok := c.procs["kubelet"]; ok && c.Admin != nil {
		started := time.Now()
		errs = append(errs, c.stopPods(ctx))
		c.logf("pods stopped in %s", time.Since(started).Round(time.Millisecond))
	}
	for _, component := range []struct {
		name  string
		grace time.Duration
	}{
		{"coredns", 5 * time.Second},
		{"kube-proxy", 5 * time.Second},
		{"kube-scheduler", 5 * time.Second},
		{"kube-controller-manager", 5 * time.Second},
		{"kubelet", 10 * time.Second},
		{"containerd", 10 * time.Second},
	} {
		started := time.Now()
		errs = append(errs, c.stop(component.name, component.grace))
		c.logf("%s stopped in %s", component.name, time.Since(started).Round(time.Millisecond))
	}
	errs = append(errs, c.killShims(), killCgroupProcesses(), c.stop(namespaceHolder, 5*time.Second),
		c.stop("kube-apiserver", 10*time.Second), c.stop("etcd", 10*time.Second),
		removeCgroups(), c.downNetwork(ctx))
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := os.RemoveAll(c.cfg.StateDir); err != nil {
		return err
	}
	if c.lock != nil {
		_ = os.Remove(lockPath)
		err := c.lock.Close()
		c.lock = nil
		return err
	}
	return nil
}

// stopPods stops every pod through the kubelet: the controllers that
// would make new ones are stopped first.
func (c *Cluster) stopPods(ctx context.Context) error {
	for _, name := range []string{"kube-controller-manager", "kube-scheduler"} {
		if err := c.stop(name, 5*time.Second); err != nil {
			return err
		}
	}
	kube, err := kubernetes.NewForConfig(c.Admin)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	namespaces, err := kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	zero := int64(0)
	for _, ns := range namespaces.Items {
		if err := kube.CoreV1().Pods(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
			return err
		}
	}
	// A pod is stopped once its sandbox's task is: the CNI plugin has then
	// freed its address and link. The containers' records stay until the
	// kubelet's next collection, and go with containerd's state.
	for {
		tasks, err := output(ctx, c.ctr("tasks", "list", "--quiet")...)
		if err == nil && strings.TrimSpace(tasks) == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the kubelet did not stop every pod: %w (tasks left: %s)", ctx.Err(), strings.Fields(tasks))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// killShims kills the runc shims of the node's containerd, which outlive it.
func (c *Cluster) killShims() error {
	for _, pid := range processesWhose(func(cmdline string) bool {
		return strings.Contains(cmdline, "containerd-shim") && strings.Contains(cmdline, c.containerdSocket())
	}) {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return err
		}
	}
	return nil
}

// killCgroupProcesses kills what still runs in the kubelet's cgroups: the
// containers of a node whose kubelet could not stop them.
func killCgroupProcesses() error {
	var pids []int
	trees, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods*")
	for _, tree := range trees {
		_ = filepath.WalkDir(tree, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.Name() != "cgroup.procs" {
				return nil //nolint:nilerr // a cgroup removed meanwhile has no processes left
			}
			content, _ := os.ReadFile(path)
			for _, field := range strings.Fields(string(content)) {
				if pid, err := strconv.Atoi(field); err == nil {
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("process %d of a container did not end", pid)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// processesWhose lists the pids whose command line (arguments joined by
// spaces) matches.
func processesWhose(match func(cmdline string) bool) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && len(cmdline) > 0 && match(string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Snapshot is what of the machine a node changes: its network links,
// addresses, routes and packet filter rules, its mounts, the tunables the
// node touches, and the node's processes.
type Snapshot struct {
	Links, Addresses, Routes, Rules, Mounts, Sysctls, Processes []string
}

var counters = regexp.MustCompile(`\[\d+:\d+\]`)

// TakeSnapshot reads the machine as it is now; its processes are those
// whose command line names stateDir.
func TakeSnapshot(ctx context.Context, stateDir string) (Snapshot, error) {
	var s Snapshot
	var err error
	lines := func(argv ...string) []string {
		if err != nil {
			return nil
		}
		var out string
		if out, err = output(ctx, argv...); err != nil {
			return nil
		}
		var kept []string
		for line := range strings.Lines(out) {
			line = strings.TrimSpace(counters.ReplaceAllString(line, ""))
			if line != "" && !strings.HasPrefix(line, "#") {
				kept = append(kept, line)
			}
		}
		return kept
	}
	s.Links = lines("ip", "-o", "link", "show")
	s.Addresses = lines("ip", "-o", "addr", "show")
	s.Routes = lines("ip", "route", "show", "table", "all")
	s.Rules = filterRules(slices.Concat(lines("iptables-save"), lines("ip6tables-save")))
	if err != nil {
		return s, err
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return s, err
	}
	for line := range strings.Lines(string(mountinfo)) {
		if fields := strings.Fields(line); len(fields) > 4 {
			s.Mounts = append(s.Mounts, fields[4])
		}
	}
	for _, name := range slices.Concat(changedSysctls, slices.Sorted(maps.Keys(kernelDefaults))) {
		value, err := readSysctl(name)
		if err != nil {
			return s, err
		}
		s.Sysctls = append(s.Sysctls, name+"="+value)
	}
	for _, pid := range processesWhose(func(cmdline string) bool {
		return strings.Contains(cmdline, stateDir)
	}) {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		s.Processes = append(s.Processes, string(bytes.ReplaceAll(bytes.TrimSuffix(cmdline, []byte{0}), []byte{0}, []byte{' '})))
	}
	slices.Sort(s.Processes)
	return s, nil
}

// builtinAccept is an empty built-in chain that accepts: what a table that
// iptables made on first use holds, and filters nothing.
var builtinAccept = regexp.MustCompile(`^:(PREROUTING|INPUT|FORWARD|OUTPUT|POSTROUTING) ACCEPT$`)

// filterRules keeps the lines of iptables-save that filter: rules, chains
// of their own and built-in chains' policies other than ACCEPT. A table the
// node's iptables made, empty again, is no change of the machine's.
func filterRules(lines []string) []string {
	var kept []string
	for _, line := range lines {
		if line != "COMMIT" && !strings.HasPrefix(line, "*") && !builtinAccept.MatchString(line) {
			kept = append(kept, line)
		}
	}
	return kept
}

// Diff says how other differs from s: what it added and what it lost.
func (s Snapshot) Diff(other Snapshot) string {
	var b strings.Builder
	for _, part := range []struct {
		name          string
		before, after []string
	}{
		{"links", s.Links, other.Links}, {"addresses", s.Addresses, other.Addresses}, {"routes", s.Routes, other.Routes},
		{"rules", s.Rules, other.Rules}, {"mounts", s.Mounts, other.Mounts}, {"sysctls", s.Sysctls, other.Sysctls},
		{"processes", s.Processes, other.Processes},
	} {
		for _, line := range part.after {
			if !slices.Contains(part.before, line) {
				fmt.Fprintf(&b, "%s: added %s\n", part.name, line)
			}
		}
		for _, line := range part.before {
			if !slices.Contains(part.after, line) {
				fmt.Fprintf(&b, "%s: lost %s\n", part.name, line)
			}
		}
	}
	return b.String()
}
