// Package testnode brings up a real single-node Kubernetes on this machine
// for the node suite (make test-node): etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, the kubelet with Debian's
// containerd and runc, kube-proxy, the CNI bridge and CoreDNS, every address
// on a bridge of its own, and tears all of it down again.
//
// It needs root. The kubelet and containerd run in a private mount
// namespace, where the kernel tunables the kubelet checks are files of its
// own: it changes none of the machine's, and every mount of a container
// goes with the namespace. Nothing a pod sends leaves the bridge but for the
// host itself: the FORWARD chain drops it.
package testnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The node's addresses: all on a bridge of its own, which no other program
// of the machine uses.
const (
	Bridge = "tlnode0"
	// BridgeIP is the pods' gateway, and the address of the API server, the
	// kubelet, CoreDNS and the test's own servers beside the node.
	BridgeIP    = "10.244.0.1"
	PodCIDR     = "10.244.0.0/24"
	ServiceCIDR = "10.96.0.0/16"
	// NodeName is the node's name, and its kubelet's user system:node:NodeName.
	NodeName = "toolledger-node"
	// APIServerPort is the API server's port on BridgeIP.
	APIServerPort = 6443
	// SandboxImage is the pause image the node's pods are made with.
	SandboxImage = "toolledger.local/pause:v1"
)

// lockPath keeps a second node suite from starting on the same machine:
// they would share the bridge and its addresses.
const lockPath = "/run/toolledger-node.lock"

// Config says where the node's binaries are and where it keeps its state.
type Config struct {
	// Bin holds kube-apiserver, etcd and kubectl (make controlplane).
	Bin string
	// NodeBin holds the kubelet, kube-proxy, kube-controller-manager,
	// kube-scheduler and coredns (make node-binaries).
	NodeBin string
	// StateDir holds certificates, configuration, logs and every
	// component's data; it is removed at teardown.
	StateDir string
	// Images are OCI image archives (WriteImage) the node imports before its
	// first pod: the node pulls nothing.
	Images []string
	// Log receives what the bring-up and the teardown do.
	Log io.Writer
}

// Cluster is a running node.
type Cluster struct {
	cfg Config
	// Kubeconfig is the path of the admin's kubeconfig.
	Kubeconfig string
	// Admin is the admin's client configuration.
	Admin *rest.Config
	// Before is the machine as it was before the bring-up.
	Before Snapshot

	lock    *os.File
	etcdURL string
	procs   map[string]*process
}

// required are the machine's programs the node runs, and the Debian
// packages they come with.
var required = map[string]string{
	"containerd":              "containerd",
	"ctr":                     "containerd",
	"runc":                    "runc",
	"iptables":                "iptables",
	"iptables-save":           "iptables",
	"ip6tables-save":          "iptables",
	"conntrack":               "conntrack",
	"ip":                      "iproute2",
	"unshare":                 "util-linux",
	"nsenter":                 "util-linux",
	"/usr/lib/cni/bridge":     "containernetworking-plugins",
	"/usr/lib/cni/host-local": "containernetworking-plugins",
	"/usr/lib/cni/loopback":   "containernetworking-plugins",
}

// Preflight says what the machine lacks to run the node, in one error.
func Preflight(cfg Config) error {
	var problems []string
	if os.Geteuid() != 0 {
		problems = append(problems, "the node runs as root (it makes a bridge, iptables rules and cgroups): run make test-node as root")
	}
	for program, pkg := range required {
		if _, err := exec.LookPath(program); err != nil {
			problems = append(problems, fmt.Sprintf("%s is missing: install Debian's %s package (make test-node does)", program, pkg))
		}
	}
	for _, binary := range []string{filepath.Join(cfg.Bin, "kube-apiserver"), filepath.Join(cfg.Bin, "etcd"), filepath.Join(cfg.Bin, "kubectl"),
		filepath.Join(cfg.NodeBin, "kubelet"), filepath.Join(cfg.NodeBin, "kube-proxy"), filepath.Join(cfg.NodeBin, "kube-controller-manager"),
		filepath.Join(cfg.NodeBin, "kube-scheduler"), filepath.Join(cfg.NodeBin, "coredns")} {
		if _, err := os.Stat(binary); err != nil {
			problems = append(problems, fmt.Sprintf("%s is missing: make node-binaries builds it", binary))
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err != nil {
		if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
			problems = append(problems, "no memory cgroup is mounted under /sys/fs/cgroup: the kubelet cannot limit a pod's memory")
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("this machine cannot run the node:\n  - %s", strings.Join(problems, "\n  - "))
	}
	return nil
}

// Up brings up the node. On failure it tears down what it started.
func Up(ctx context.Context, cfg Config) (c *Cluster, err error) {
	if err := Preflight(cfg); err != nil {
		return nil, err
	}
	lock, err := acquireLock()
	if err != nil {
		return nil, err
	}
	c = &Cluster{cfg: cfg, lock: lock, procs: map[string]*process{}}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Down(context.WithoutCancel(ctx)))
		}
	}()
	// A node whose suite was killed left its state: take it down first.
	if _, statErr := os.Stat(cfg.StateDir); statErr == nil {
		c.logf("a previous node left %s: tearing it down first", cfg.StateDir)
		if err := c.Down(ctx); err != nil {
			return nil, fmt.Errorf("cannot tear down what a previous node left: %w", err)
		}
		if c.lock, err = acquireLock(); err != nil {
			return nil, err
		}
	}
	if c.Before, err = TakeSnapshot(ctx, cfg.StateDir); err != nil {
		return nil, err
	}
	for _, dir := range []string{"pki", "logs", "run", "sysctl", "cni", "cni-ipam", "kubelet", "etcd", "containerd"} {
		if err := os.MkdirAll(filepath.Join(cfg.StateDir, dir), 0o700); err != nil {
			return nil, err
		}
	}
	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		{"network", c.upNetwork},
		{"certificates", c.writePKI},
		{"etcd", c.startEtcd},
		{"kube-apiserver", c.startAPIServer},
		{"bootstrap RBAC", c.bootstrapRBAC},
		{"controller-manager and scheduler", c.startControllers},
		{"containerd", c.startContainerd},
		{"images", c.importImages},
		{"kubelet", c.startKubelet},
		{"kube-proxy", c.startKubeProxy},
		{"CoreDNS", c.startCoreDNS},
		{"node Ready", c.waitNodeReady},
	}
	for _, step := range steps {
		started := time.Now()
		if err := step.run(ctx); err != nil {
			return nil, fmt.Errorf("bringing up the node, %s: %w", step.name, err)
		}
		c.logf("%s: up in %s", step.name, time.Since(started).Round(time.Millisecond))
	}
	return c, nil
}

func acquireLock() (*os.File, error) {
	lock, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(lockPath)
		_ = lock.Close()
		return nil, fmt.Errorf("another node runs on this machine (process %s holds %s): one at a time", strings.TrimSpace(string(holder)), lockPath)
	}
	if err := lock.Truncate(0); err != nil {
		return nil, err
	}
	_, err = fmt.Fprintf(lock, "%d\n", os.Getpid())
	return lock, err
}

func (c *Cluster) logf(format string, args ...any) {
	if c.cfg.Log != nil {
		_, _ = fmt.Fprintf(c.cfg.Log, "node: "+format+"\n", args...)
	}
}

func (c *Cluster) path(parts ...string) string {
	return filepath.Join(append([]string{c.cfg.StateDir}, parts...)...)
}

// Server is the API server's URL.
func Server() string {
	return fmt.Sprintf("https://%s", net.JoinHostPort(BridgeIP, fmt.Sprint(APIServerPort)))
}

func (c *Cluster) loadAdmin() error {
	config, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	c.Admin = config
	return nil
}
