package testnode

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/toolledger/toolledger/internal/testenv"
)

// The node's users: each component its own, as a cluster's installer makes
// them; only the test's admin is in system:masters.
const (
	adminUser         = "toolledger-node-admin"
	kubeletClientUser = "kube-apiserver-kubelet-client"
	coreDNSUser       = "toolledger-node:coredns"
	frontProxyUser    = "front-proxy-client"
)

// clientCert is a component's client certificate: its user and groups.
type clientCert struct {
	dir, user string
	groups    []string
}

var clientCerts = []clientCert{
	{"admin", adminUser, []string{"system:masters"}},
	{"apiserver-kubelet-client", kubeletClientUser, nil},
	{"kubelet-client", "system:node:" + NodeName, []string{"system:nodes"}},
	{"controller-manager", "system:kube-controller-manager", nil},
	{"scheduler", "system:kube-scheduler", nil},
	{"kube-proxy", "system:kube-proxy", nil},
	{"coredns", coreDNSUser, nil},
}

// writePKI makes the cluster's CA, the front proxy's CA, the service
// accounts' signing key, the servers' certificates and a kubeconfig for
// each component.
func (c *Cluster) writePKI(context.Context) error {
	pki := c.path("pki")
	ca, err := testenv.LoadOrNewCA(pki, "toolledger-node-ca")
	if err != nil {
		return err
	}
	bridgeIP := net.ParseIP(BridgeIP)
	if err := ca.IssueCert(filepath.Join(pki, "apiserver"), testenv.Cert{
		CommonName: "kube-apiserver", Server: true,
		DNSNames: []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"},
		IPs:      []net.IP{bridgeIP, net.ParseIP("10.96.0.1"), net.IPv4(127, 0, 0, 1)},
	}); err != nil {
		return err
	}
	if err := ca.IssueCert(filepath.Join(pki, "kubelet-serving"), testenv.Cert{
		CommonName: "system:node:" + NodeName, Organizations: []string{"system:nodes"}, Server: true,
		DNSNames: []string{NodeName}, IPs: []net.IP{bridgeIP},
	}); err != nil {
		return err
	}
	for _, cert := range clientCerts {
		dir := filepath.Join(pki, cert.dir)
		if err := ca.IssueCert(dir, testenv.Cert{CommonName: cert.user, Organizations: cert.groups, Client: true}); err != nil {
			return err
		}
		if err := writeKubeconfig(filepath.Join(dir, "kubeconfig"), filepath.Join(pki, "ca.crt"), dir); err != nil {
			return err
		}
	}
	frontProxy, err := testenv.LoadOrNewCA(filepath.Join(pki, "front-proxy"), "toolledger-node-front-proxy-ca")
	if err != nil {
		return err
	}
	if err := frontProxy.Issue(filepath.Join(pki, "front-proxy", "client"), frontProxyUser); err != nil {
		return err
	}
	if err := writeServiceAccountKey(pki); err != nil {
		return err
	}
	c.Kubeconfig = filepath.Join(pki, "admin", "kubeconfig")
	return c.loadAdmin()
}

func writeKubeconfig(path, caFile, certDir string) error {
	config := clientcmdapi.NewConfig()
	config.Clusters["node"] = &clientcmdapi.Cluster{Server: Server(), CertificateAuthority: caFile}
	config.AuthInfos["user"] = &clientcmdapi.AuthInfo{
		ClientCertificate: filepath.Join(certDir, "tls.crt"), ClientKey: filepath.Join(certDir, "tls.key"),
	}
	config.Contexts["node"] = &clientcmdapi.Context{Cluster: "node", AuthInfo: "user"}
	config.CurrentContext = "node"
	return clientcmd.WriteToFile(*config, path)
}

// writeServiceAccountKey writes the key that signs service account tokens
// (sa.key) and its public half (sa.pub).
func writeServiceAccountKey(pki string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	private, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	public, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(pki, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: private}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(pki, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: public}), 0o600)
}

// bootstrapRBAC grants the API server's kubelet client and CoreDNS what
// they need, and nothing more: the other components' users have roles the
// API server makes itself.
func (c *Cluster) bootstrapRBAC(ctx context.Context) error {
	kube, err := kubernetes.NewForConfig(c.Admin)
	if err != nil {
		return err
	}
	roles := kube.RbacV1()
	if _, err := roles.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "toolledger-node:apiserver-kubelet-client"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:kubelet-api-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: kubeletClientUser}},
	}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("cannot bind the API server's kubelet client: %w", err)
	}
	if _, err := roles.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "toolledger-node:coredns"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("cannot make CoreDNS's role: %w", err)
	}
	if _, err := roles.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "toolledger-node:coredns"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "toolledger-node:coredns"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: coreDNSUser}},
	}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("cannot bind CoreDNS's role: %w", err)
	}
	return nil
}

// UserKubeconfig writes a kubeconfig for the user name in groups, with a
// client certificate of the cluster's CA, and returns its path: a person
// of a tenant, whom only RBAC lets do anything.
func (c *Cluster) UserKubeconfig(name string, groups ...string) (string, error) {
	pki := c.path("pki")
	ca, err := testenv.LoadOrNewCA(pki, "toolledger-node-ca")
	if err != nil {
		return "", err
	}
	dir := filepath.Join(pki, "users", name)
	if err := ca.IssueCert(dir, testenv.Cert{CommonName: name, Organizations: groups, Client: true}); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubeconfig")
	return path, writeKubeconfig(path, filepath.Join(pki, "ca.crt"), dir)
}
