//go:build node && linux

package node

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/internal/testnode"
)

var _ = Describe("The node", func() {
	It("is Ready, and its binaries say their version", func(ctx SpecContext) {
		node, err := kube.CoreV1().Nodes().Get(ctx, testnode.NodeName, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(node.Status.NodeInfo.KubeletVersion).To(Equal("v1.37.2"))
		Expect(node.Status.NodeInfo.ContainerRuntimeVersion).To(HavePrefix("containerd://1.6"))
		version := admin(ctx, "version")
		Expect(version).To(ContainSubstring("Client Version: v1.37.2"))
		Expect(version).To(ContainSubstring("Server Version: v1.37.2"))
	})
})
