//go:build tools

// Package coredns pins the CoreDNS that `make test-node` runs as the node's
// cluster DNS.
package coredns

import (
	_ "github.com/coredns/coredns"
)
