package testnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// kernelDefaults are the tunables the kubelet checks (protectKernelDefaults)
// and would otherwise set machine-wide; in the node's mount namespace each
// is a file of the node's holding what the kubelet expects.
var kernelDefaults = map[string]string{
	"vm.overcommit_memory":      "1",
	"vm.panic_on_oom":           "0",
	"kernel.panic":              "10",
	"kernel.panic_on_oops":      "1",
	"kernel.keys.root_maxkeys":  "1000000",
	"kernel.keys.root_maxbytes": "25000000",
}

// namespaceHolder keeps the node's private mount namespace while the node
// runs; containerd and the kubelet join it.
const namespaceHolder = "mount-namespace"

func (c *Cluster) inNamespace() []string {
	return []string{"nsenter", fmt.Sprintf("--mount=/proc/%d/ns/mnt", c.procs[namespaceHolder].cmd.Process.Pid), "--"}
}

func (c *Cluster) startContainerd(ctx context.Context) error {
	// flock names the state directory in the holder's command line, where
	// a teardown after a killed suite finds it.
	if err := c.start(namespaceHolder, "unshare", "--mount", "--propagation", "private", "--",
		"flock", c.path("run", "namespace.lock"), "sleep", "infinity"); err != nil {
		return err
	}
	if err := c.waitFor(ctx, namespaceHolder, 10*time.Second, func(ctx context.Context) error {
		// unshare has made the namespace once its pid runs flock.
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", c.procs[namespaceHolder].cmd.Process.Pid))
		if err == nil && strings.TrimSpace(string(comm)) != "flock" {
			return fmt.Errorf("not yet in the namespace: %s", comm)
		}
		return err
	}); err != nil {
		return err
	}
	for name, value := range kernelDefaults {
		file := c.path("sysctl", name)
		if err := writeFile(file, value+"\n"); err != nil {
			return err
		}
		if err := run(ctx, append(c.inNamespace(), "mount", "--bind", file, sysctlPath(name))...); err != nil {
			return err
		}
	}
	if err := writeFile(c.path("cni", "10-toolledger-node.conflist"), fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "toolledger-node",
  "plugins": [{
    "type": "bridge",
    "bridge": %q,
    "isGateway": true,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "dataDir": %q,
      "ranges": [[{"subnet": %q, "gateway": %q}]],
      "routes": [{"dst": "0.0.0.0/0"}]
    }
  }]
}
`, Bridge, c.path("cni-ipam"), PodCIDR, BridgeIP)); err != nil {
		return err
	}
	config := c.path("containerd", "config.toml")
	if err := writeFile(config, fmt.Sprintf(`version = 2
root = %q
state = %q

[grpc]
  address = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  # Root here cannot set a negative oom_score_adj (no CAP_SYS_RESOURCE).
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %q

[plugins."io.containerd.internal.v1.opt"]
  path = %q
`, c.path("containerd", "root"), c.path("containerd", "state"), c.containerdSocket(), SandboxImage,
		c.path("cni"), c.path("containerd", "opt"))); err != nil {
		return err
	}
	if err := c.start("containerd", append(c.inNamespace(), "containerd", "--config", config)...); err != nil {
		return err
	}
	return c.waitFor(ctx, "containerd", time.Minute, func(ctx context.Context) error {
		return run(ctx, c.ctr("version")...)
	})
}

func (c *Cluster) containerdSocket() string {
	return c.path("containerd.sock")
}

// ctr is a ctr command on the node's containerd, in the namespace the
// kubelet's images and containers are in.
func (c *Cluster) ctr(args ...string) []string {
	return append([]string{"ctr", "--address", c.containerdSocket(), "--namespace", "k8s.io"}, args...)
}

func (c *Cluster) importImages(ctx context.Context) error {
	for _, archive := range c.cfg.Images {
		if err := run(ctx, c.ctr("images", "import", archive)...); err != nil {
			return fmt.Errorf("cannot import %s: %w", archive, err)
		}
	}
	return nil
}

func (c *Cluster) startKubelet(ctx context.Context) error {
	pki := c.path("pki")
	if err := writeFile(c.path("resolv.conf"), "# the node's pods resolve cluster names only\n"); err != nil {
		return err
	}
	config := c.path("kubelet.yaml")
	if err := writeFile(config, fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: 10250
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %[2]s
authorization:
  mode: Webhook
tlsCertFile: %[3]s
tlsPrivateKeyFile: %[4]s
# This machine mounts cgroup v1.
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
protectKernelDefaults: true
clusterDNS: [%[1]s]
clusterDomain: cluster.local
resolvConf: %[5]s
containerRuntimeEndpoint: unix://%[6]s
# The node pulls nothing: its images are never collected.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "200Mi"
  nodefs.available: "1%%"
  imagefs.available: "1%%"
serializeImagePulls: false
`, BridgeIP, filepath.Join(pki, "ca.crt"), filepath.Join(pki, "kubelet-serving", "tls.crt"),
		filepath.Join(pki, "kubelet-serving", "tls.key"), c.path("resolv.conf"), c.containerdSocket())); err != nil {
		return err
	}
	err := c.start("kubelet", append(c.inNamespace(), filepath.Join(c.cfg.NodeBin, "kubelet"),
		"--config", config, "--kubeconfig", filepath.Join(pki, "kubelet-client", "kubeconfig"),
		"--hostname-override", NodeName, "--node-ip", BridgeIP, "--root-dir", c.path("kubelet"))...)
	return err
}

// KillContainer kills a container's processes with SIGKILL, as the kernel's
// OOM killer or a crash would: containerID is a pod status's, with or
// without its containerd:// prefix.
func (c *Cluster) KillContainer(ctx context.Context, containerID string) error {
	return run(ctx, c.ctr("tasks", "kill", "--all", "--signal", "SIGKILL", strings.TrimPrefix(containerID, "containerd://"))...)
}
