//go:build tools

// Package controlplane pins the control-plane binaries built by `make
// controlplane`, and the kubectl that the specs and the end-to-end suite run.
package controlplane

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
