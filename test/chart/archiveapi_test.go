package chart

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestArchiveAPI: with an archive, the chart registers the archive API
// (an APIService for the managers' Service) with a serving certificate the
// APIService's caBundle verifies for the Service's name, mounts it for the
// manager, and lets the manager read the API server's front-proxy
// configuration; without an archive, none of it.
func TestArchiveAPI(t *testing.T) {
	if obj := find(decodeObjects(t, helmTemplate(t)), "APIService", "v1alpha1.archive.toolledger.dev"); obj != nil {
		t.Errorf("without an archive the chart registers the archive API")
	}
	objects := decodeObjects(t, helmTemplate(t, "--set", "archive.dsnSecret.name=ledger-archive"))
	apiService := find(objects, "APIService", "v1alpha1.archive.toolledger.dev")
	if apiService == nil {
		t.Fatal("with an archive the chart registers no archive APIService")
	}
	service, _, _ := unstructured.NestedMap(apiService.Object, "spec", "service")
	if service["name"] != chartPrefix+"archive-api" || service["namespace"] != releaseNamespace {
		t.Errorf("the APIService points at %v, want Service %s in %s", service, chartPrefix+"archive-api", releaseNamespace)
	}
	if find(objects, "Service", chartPrefix+"archive-api") == nil {
		t.Errorf("no Service %sarchive-api", chartPrefix)
	}

	caBundle, _, _ := unstructured.NestedString(apiService.Object, "spec", "caBundle")
	roots := x509.NewCertPool()
	if ca, err := base64.StdEncoding.DecodeString(caBundle); err != nil || !roots.AppendCertsFromPEM(ca) {
		t.Fatalf("the APIService's caBundle is no PEM certificate (%v)", err)
	}
	secret := find(objects, "Secret", chartPrefix+"archive-api-tls")
	if secret == nil {
		t.Fatal("no serving certificate Secret for the archive API")
	}
	crt, _, _ := unstructured.NestedString(secret.Object, "data", "tls.crt")
	der, _ := base64.StdEncoding.DecodeString(crt)
	block, _ := pem.Decode(der)
	if block == nil {
		t.Fatal("the archive API's tls.crt is not PEM")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	dnsName := chartPrefix + "archive-api." + releaseNamespace + ".svc"
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: dnsName}); err != nil {
		t.Errorf("the API server cannot verify the archive API's certificate for %s with the caBundle: %v", dnsName, err)
	}

	container := soleContainer(t, deployment(t, objects, monitoringName))
	wantArgs(t, container.Args, []string{"--archive-api-bind-address=:8445", "--archive-api-cert-dir=/var/run/toolledger/archive-api-certs"}, nil)
	mounted := false
	for _, m := range container.VolumeMounts {
		mounted = mounted || (m.Name == "archive-api-certs" && m.MountPath == "/var/run/toolledger/archive-api-certs")
	}
	if !mounted {
		t.Errorf("the archive API's certificate is not mounted: %+v", container.VolumeMounts)
	}

	binding := find(objects, "RoleBinding", chartPrefix+"archive-api-authentication-reader")
	if binding == nil || binding.GetNamespace() != "kube-system" {
		t.Fatalf("no RoleBinding in kube-system for the front-proxy configuration: %v", binding)
	}
	if role, _, _ := unstructured.NestedString(binding.Object, "roleRef", "name"); role != "extension-apiserver-authentication-reader" {
		t.Errorf("the manager is bound to %q in kube-system, want extension-apiserver-authentication-reader", role)
	}

	objects = decodeObjects(t, helmTemplate(t, "--set", "archive.dsnSecret.name=ledger-archive", "--set", "archive.api.enabled=false"))
	if find(objects, "APIService", "v1alpha1.archive.toolledger.dev") != nil {
		t.Errorf("with archive.api.enabled=false the chart still registers the archive API")
	}
	wantArgs(t, soleContainer(t, deployment(t, objects, monitoringName)).Args, nil, []string{"--archive-api-cert-dir=/var/run/toolledger/archive-api-certs"})

	_, err = helmTemplateErr(t, "--set", "archive.dsnSecret.name=ledger-archive", "--set", "archive.api.certSecret=own-cert")
	if err == nil || !strings.Contains(err.Error(), "archive.api.certSecret needs archive.api.caBundle") {
		t.Errorf("an own certificate without its CA: %v, want the chart to refuse", err)
	}
	objects = decodeObjects(t, helmTemplate(t, "--set", "archive.dsnSecret.name=ledger-archive", "--set", "archive.api.certSecret=own-cert",
		"--set", "archive.api.apiServiceAnnotations.cert-manager\\.io/inject-ca-from=toolledger-system/archive-api"))
	if find(objects, "Secret", chartPrefix+"archive-api-tls") != nil {
		t.Errorf("with archive.api.certSecret the chart still makes a certificate")
	}
	apiService = find(objects, "APIService", "v1alpha1.archive.toolledger.dev")
	if got := apiService.GetAnnotations()["cert-manager.io/inject-ca-from"]; got != "toolledger-system/archive-api" {
		t.Errorf("the APIService's inject-ca-from annotation is %q", got)
	}
}
