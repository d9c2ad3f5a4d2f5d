package testnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/toolledger/toolledger/internal/testenv"
)

// startEtcd starts etcd on a free port of 127.0.0.1, trying another when
// something took the port between choosing and binding it.
func (c *Cluster) startEtcd(ctx context.Context) error {
	var err error
	for range 3 {
		var client, peer string
		if client, err = testenv.FreeLocalAddr(); err != nil {
			return err
		}
		if peer, err = testenv.FreeLocalAddr(); err != nil {
			return err
		}
		c.etcdURL = "http://" + client
		if err = c.start("etcd", filepath.Join(c.cfg.Bin, "etcd"), "--data-dir", c.path("etcd"), "--name", "node",
			"--listen-client-urls", c.etcdURL, "--advertise-client-urls", c.etcdURL,
			"--listen-peer-urls", "http://"+peer, "--initial-advertise-peer-urls", "http://"+peer,
			"--initial-cluster", "node=http://"+peer, "--unsafe-no-fsync"); err != nil {
			return err
		}
		if err = c.waitFor(ctx, "etcd", time.Minute, func(ctx context.Context) error {
			return httpGetOK(ctx, http.DefaultClient, c.etcdURL+"/health")
		}); err == nil {
			return nil
		}
		if stopErr := c.stop("etcd", 5*time.Second); stopErr != nil {
			return stopErr
		}
		if !strings.Contains(err.Error(), "address already in use") {
			return err
		}
	}
	return err
}

func (c *Cluster) startAPIServer(ctx context.Context) error {
	pki := c.path("pki")
	if err := c.start("kube-apiserver", filepath.Join(c.cfg.Bin, "kube-apiserver"),
		"--etcd-servers", c.etcdURL,
		"--bind-address", BridgeIP, "--advertise-address", BridgeIP, fmt.Sprintf("--secure-port=%d", APIServerPort),
		"--tls-cert-file", filepath.Join(pki, "apiserver", "tls.crt"), "--tls-private-key-file", filepath.Join(pki, "apiserver", "tls.key"),
		"--client-ca-file", filepath.Join(pki, "ca.crt"),
		"--service-cluster-ip-range", ServiceCIDR,
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", filepath.Join(pki, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(pki, "sa.key"),
		"--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction",
		"--kubelet-client-certificate", filepath.Join(pki, "apiserver-kubelet-client", "tls.crt"),
		"--kubelet-client-key", filepath.Join(pki, "apiserver-kubelet-client", "tls.key"),
		"--kubelet-certificate-authority", filepath.Join(pki, "ca.crt"),
		"--kubelet-preferred-address-types", "InternalIP",
		"--requestheader-client-ca-file", filepath.Join(pki, "front-proxy", "ca.crt"),
		"--requestheader-allowed-names", frontProxyUser,
		"--requestheader-username-headers", "X-Remote-User", "--requestheader-uid-headers", "X-Remote-Uid",
		"--requestheader-group-headers", "X-Remote-Group", "--requestheader-extra-headers-prefix", "X-Remote-Extra-",
		"--proxy-client-cert-file", filepath.Join(pki, "front-proxy", "client", "tls.crt"),
		"--proxy-client-key-file", filepath.Join(pki, "front-proxy", "client", "tls.key"),
		// Aggregated APIs are reached at their endpoints, as the API server
		// runs on the host.
		"--enable-aggregator-routing=true",
		"--profiling=false",
	); err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(c.Admin)
	if err != nil {
		return err
	}
	return c.waitFor(ctx, "kube-apiserver", 2*time.Minute, func(ctx context.Context) error {
		_, err := kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	})
}

// startControllers starts the controller-manager (garbage collector,
// namespace deletion, Deployments, Jobs and their TTL, service accounts'
// tokens, each controller as its own service account) and the scheduler.
// Neither serves HTTPS: their health is their work.
func (c *Cluster) startControllers(ctx context.Context) error {
	pki := c.path("pki")
	if err := c.start("kube-controller-manager", filepath.Join(c.cfg.NodeBin, "kube-controller-manager"),
		"--kubeconfig", filepath.Join(pki, "controller-manager", "kubeconfig"),
		"--secure-port=0", "--leader-elect=false", "--use-service-account-credentials=true",
		"--service-account-private-key-file", filepath.Join(pki, "sa.key"),
		"--root-ca-file", filepath.Join(pki, "ca.crt"),
		"--cluster-signing-cert-file", filepath.Join(pki, "ca.crt"), "--cluster-signing-key-file", filepath.Join(pki, "ca.key"),
		"--allocate-node-cidrs=false", "--controllers=*",
	); err != nil {
		return err
	}
	if err := c.start("kube-scheduler", filepath.Join(c.cfg.NodeBin, "kube-scheduler"),
		"--kubeconfig", filepath.Join(pki, "scheduler", "kubeconfig"),
		"--secure-port=0", "--leader-elect=false",
	); err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(c.Admin)
	if err != nil {
		return err
	}
	// The controller-manager works once it has made the namespace's
	// ServiceAccount, which every pod needs.
	return c.waitFor(ctx, "kube-controller-manager", 2*time.Minute, func(ctx context.Context) error {
		_, err := kube.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

func (c *Cluster) startKubeProxy(ctx context.Context) error {
	if err := c.start("kube-proxy", filepath.Join(c.cfg.NodeBin, "kube-proxy"),
		"--kubeconfig", c.path("pki", "kube-proxy", "kubeconfig"),
		"--hostname-override", NodeName, "--proxy-mode", "iptables", "--cluster-cidr", PodCIDR,
		// It changes no tunable of the machine's: no conntrack table sizes or
		// timeouts, no route_localnet.
		"--conntrack-max-per-core=0", "--conntrack-min=0",
		"--conntrack-tcp-timeout-established=0s", "--conntrack-tcp-timeout-close-wait=0s",
		"--iptables-localhost-nodeports=false",
		"--healthz-bind-address", net.JoinHostPort(BridgeIP, "10256"),
		"--metrics-bind-address", net.JoinHostPort(BridgeIP, "10249"),
	); err != nil {
		return err
	}
	return c.waitFor(ctx, "kube-proxy", time.Minute, func(ctx context.Context) error {
		return httpGetOK(ctx, http.DefaultClient, "http://"+net.JoinHostPort(BridgeIP, "10256")+"/healthz")
	})
}

// startCoreDNS serves cluster.local on BridgeIP:53 from the host, as its
// own user; it forwards no other name, so that no pod resolves anything
// outside the cluster.
func (c *Cluster) startCoreDNS(ctx context.Context) error {
	corefile := c.path("Corefile")
	if err := writeFile(corefile, fmt.Sprintf(`cluster.local:53 in-addr.arpa:53 {
    bind %[1]s
    errors
    kubernetes cluster.local in-addr.arpa {
        kubeconfig %[2]s node
        pods insecure
    }
    health %[1]s:8181
}
.:53 {
    bind %[1]s
    errors
}
`, BridgeIP, c.path("pki", "coredns", "kubeconfig"))); err != nil {
		return err
	}
	if err := c.start("coredns", filepath.Join(c.cfg.NodeBin, "coredns"), "-conf", corefile); err != nil {
		return err
	}
	return c.waitFor(ctx, "coredns", time.Minute, func(ctx context.Context) error {
		return httpGetOK(ctx, http.DefaultClient, "http://"+net.JoinHostPort(BridgeIP, "8181")+"/health")
	})
}

func (c *Cluster) waitNodeReady(ctx context.Context) error {
	kube, err := kubernetes.NewForConfig(c.Admin)
	if err != nil {
		return err
	}
	return c.waitFor(ctx, "kubelet", 2*time.Minute, func(ctx context.Context) error {
		node, err := kube.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				if cond.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("node not ready: %s", cond.Message)
			}
		}
		return errors.New("node has no Ready condition yet")
	})
}

func httpGetOK(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

// sysctlPath is the /proc/sys file of a tunable named with dots.
func sysctlPath(name string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(name, ".", "/"))
}

func readSysctl(name string) (string, error) {
	value, err := os.ReadFile(sysctlPath(name))
	return strings.TrimSpace(string(value)), err
}
