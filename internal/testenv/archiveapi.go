package testenv

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	archivev1alpha1 "github.com/toolledger/toolledger/api/archive/v1alpha1"
	"github.com/toolledger/toolledger/cmd/manager/app"
)

// ArchiveAPIService names the Service the archive's APIService points at,
// as the chart names it.
const ArchiveAPIService = "toolledger-archive-api"

// ArchiveAPIServerName is the name the API server expects on the archive
// API's serving certificate: the Service's DNS name.
var ArchiveAPIServerName = ArchiveAPIService + "." + app.DefaultNamespace() + ".svc"

// ArchiveAPI is the archive API of a local manager: its serving
// certificate in CertDir, signed by a CA the APIService names.
type ArchiveAPI struct {
	CertDir string
	ca      *CA
}

// NewArchiveAPI issues the archive API's serving certificate into certDir.
func NewArchiveAPI(certDir string) (*ArchiveAPI, error) {
	ca, err := LoadOrNewCA(certDir, "toolledger-archive-api-ca")
	if err != nil {
		return nil, err
	}
	if err := ca.Issue(certDir, ArchiveAPIServerName, ArchiveAPIServerName); err != nil {
		return nil, err
	}
	return &ArchiveAPI{CertDir: certDir, ca: ca}, nil
}

// apiServiceName is the archive's APIService, as the chart names it.
var apiServiceName = archivev1alpha1.GroupVersion.Version + "." + archivev1alpha1.GroupVersion.Group

// Register points a local API server's archive.toolledger.dev/v1alpha1 at
// a manager serving it on 127.0.0.1:port: an ExternalName Service naming
// 127.0.0.1 (a local control plane has no Service network, and its API
// server runs on this machine), and the APIService.
func (a *ArchiveAPI) Register(ctx context.Context, c client.Client, port int) error {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: ArchiveAPIService, Namespace: app.DefaultNamespace()}}
	if _, err := controllerutil.CreateOrUpdate(ctx, c, svc, func() error {
		svc.Spec = corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "127.0.0.1",
			Ports: []corev1.ServicePort{{Name: "https", Port: int32(port)}}}
		return nil
	}); err != nil {
		return fmt.Errorf("cannot create the archive API's Service: %w", err)
	}
	apiService := &unstructured.Unstructured{}
	apiService.SetAPIVersion("apiregistration.k8s.io/v1")
	apiService.SetKind("APIService")
	apiService.SetName(apiServiceName)
	spec := map[string]any{
		"group": archivev1alpha1.GroupVersion.Group, "version": archivev1alpha1.GroupVersion.Version,
		"groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
		"caBundle": a.ca.PEM,
		"service":  map[string]any{"namespace": app.DefaultNamespace(), "name": ArchiveAPIService, "port": int64(port)},
	}
	if _, err := controllerutil.CreateOrUpdate(ctx, c, apiService, func() error {
		apiService.Object["spec"] = spec
		return nil
	}); err != nil {
		return fmt.Errorf("cannot create the archive's APIService: %w", err)
	}
	return nil
}

// WaitAvailable returns once the API server finds the archive API
// available: it reached the manager and read its discovery.
func WaitAvailable(ctx context.Context, c client.Client) error {
	return wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		return apiServiceAvailable(ctx, c, apiServiceName)
	})
}

func apiServiceAvailable(ctx context.Context, c client.Client, name string) (bool, error) {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("apiregistration.k8s.io/v1")
	u.SetKind("APIService")
	if err := c.Get(ctx, client.ObjectKey{Name: name}, u); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, raw := range conditions {
		condition, _ := raw.(map[string]any)
		if condition["type"] == "Available" {
			return condition["status"] == "True", nil
		}
	}
	return false, nil
}

// PortOf is the port of a host:port address.
func PortOf(address string) (int, error) {
	_, port, err := net.SplitHostPort(address)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(port)
}
