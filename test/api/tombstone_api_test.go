package api

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/testenv/specenv"
)

var _ = Describe("The retention and tombstone API", func() {
	It("refuses a recordRetention longer than the keyRetention", func() {
		ns := env.NewTenant()
		manifest := specenv.WriteManifest(fmt.Sprintf(`apiVersion: toolledger.dev/v1alpha1
kind: Tool
metadata: {name: charge, namespace: %s}
spec:
  operation: payments.charge
  version: v1
  idempotencyClass: NonRepeatable
  http: {url: "http://127.0.0.1:1/charges"}
  recordRetention: 48h
  keyRetention: 24h
`, ns))
		out, err := env.Kubectl("apply", "-f", manifest)
		Expect(err).To(HaveOccurred())
		Expect(out).To(ContainSubstring(`spec: Invalid value: recordRetention must not exceed keyRetention: the key is kept at least as long as the record`))
	})

	It("keeps a tombstone's record immutable", func() {
		ns := env.NewTenant()
		ctx := context.Background()
		tomb := &v1alpha1.Tombstone{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "order-1-charge"},
			Record: v1alpha1.TombstoneRecord{ActionUID: "uid-1", RequestDigest: "sha256:aa", Phase: v1alpha1.PhaseSucceeded,
				CompletionTime: metav1.NewTime(time.Now()), ToolRef: v1alpha1.ToolReference{Kind: v1alpha1.KindTool, Name: "charge"},
				Cause: v1alpha1.TombstoneCauseDeleted, DeletionTime: metav1.NewTime(time.Now())},
		}
		Expect(k8s.Create(ctx, tomb)).To(Succeed())
		tomb.Record.ExternalRef = "ch_forged"
		err := k8s.Update(ctx, tomb)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("record is immutable: a tombstone keeps what the deleted action did"))
	})
})
