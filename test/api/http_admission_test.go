package api

import (
	"fmt"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/toolledger/toolledger/internal/testenv/specenv"
)

var _ = Describe("Admission of the HTTP adapter's options", func() {
	It("admits every sample", func() {
		ns := env.NewTenant()
		out, err := env.Kubectl("apply", "--dry-run=server", "-n", ns, "-k", filepath.Join("..", "..", "config", "samples"))
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("tool.toolledger.dev/stripe-charge created (server dry run)"))
		Expect(out).To(ContainSubstring("tool.toolledger.dev/ticket created (server dry run)"))
		Expect(out).To(ContainSubstring("tool.toolledger.dev/chat-message created (server dry run)"))
	})

	DescribeTable("refuses a contradictory Tool with a message that says why",
		func(http, want string) {
			ns := env.NewTenant()
			out, err := env.Kubectl("apply", "-f", specenv.WriteManifest(fmt.Sprintf(`apiVersion: toolledger.dev/v1alpha1
kind: Tool
metadata: {name: contradictory, namespace: %s}
spec:
  operation: x
  version: v1
  idempotencyClass: KeyProtected
  http:
    url: https://api.example/x
%s`, ns, http)))
			Expect(err).To(HaveOccurred())
			Expect(out).To(ContainSubstring(want))
		},
		Entry("a key in a body field without the field", "    idempotencyKey: {in: BodyField}\n",
			"bodyField is set exactly when in is BodyField"),
		Entry("a body field for a key in a header", "    idempotencyKey: {bodyField: idempotency_key}\n",
			"bodyField is set exactly when in is BodyField"),
		Entry("a key in the body of a request without one", "    encoding: Query\n    idempotencyKey: {in: BodyField, bodyField: k}\n",
			"a key in a body field needs a body: use encoding JSON or Form"),
		Entry("a key limit too short for a hashed key", "    idempotencyKey: {maxLength: 32}\n",
			"should be greater than or equal to 40"),
		Entry("a Replay lookup with a URL", "    lookup: {strategy: Replay, url: https://api.example/x, replayWindow: 24h}\n",
			"a Replay lookup takes replayWindow and no url"),
		Entry("a Replay lookup without its window", "    lookup: {strategy: Replay}\n",
			"a Replay lookup takes replayWindow and no url"),
		Entry("a Replay lookup that says a 404 proves absence", "    lookup: {strategy: Replay, replayWindow: 24h, notFoundMeansAbsent: true}\n",
			"a Replay lookup takes no match, itemsPointer, notFoundMeansAbsent or noMatchMeansAbsent"),
		Entry("a Reference lookup without a match rule", "    lookup: {strategy: Reference, url: \"https://api.example/t?ref={ref}\"}\n",
			"a Reference lookup needs at least one match rule"),
		Entry("a Key lookup without a URL", "    lookup: {notFoundMeansAbsent: true}\n",
			"a Key or Reference lookup takes a url and no replayWindow"),
	)
})
