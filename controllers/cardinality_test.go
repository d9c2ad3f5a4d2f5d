package controllers_test

import (
	"context"
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/kubernetes"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

var _ = Describe("Metrics cardinality", func() {
	It("counts actions naming 50 missing tools under the one tool label <unresolved>", func() {
		ctx := context.Background()
		ns := env.NewTenant()
		clients, err := kubernetes.NewForConfig(cfg)
		Expect(err).NotTo(HaveOccurred())
		scraper := scraperToken(ctx, clients, ns, true)

		const missing = 50
		for i := range missing {
			Expect(k8s.Create(ctx, newAction(ns, fmt.Sprintf("a-%d", i), fmt.Sprintf("missing-%d", i), charge(1)))).To(Succeed())
		}
		for i := range missing {
			failed := env.WaitForPhase(ns, fmt.Sprintf("a-%d", i), v1alpha1.PhaseFailed)
			Expect(failed.Status.Error.Reason).To(Equal("ToolNotFound"))
		}

		unresolved := map[string]string{"namespace": ns, "tool_kind": v1alpha1.KindTool, "tool": "<unresolved>", "class": ""}
		Eventually(func(g Gomega) {
			m := scrape(g, scraper)
			// Each family's series of the namespace, by tool label.
			series := map[string][]string{}
			for name := range m {
				for _, metric := range m.matching(name, map[string]string{"namespace": ns}) {
					for _, label := range metric.GetLabel() {
						if label.GetName() == "tool" {
							series[name] = append(series[name], label.GetValue())
						}
					}
				}
			}
			g.Expect(series).To(Equal(map[string][]string{
				"toolledger_actions_created_total":   {"<unresolved>"},
				"toolledger_actions_finished_total":  {"<unresolved>"},
				"toolledger_action_duration_seconds": {"<unresolved>"},
			}))
			g.Expect(m.value("toolledger_actions_created_total", unresolved)).To(Equal(float64(missing)))
			g.Expect(m.value("toolledger_actions_finished_total", unresolved)).To(Equal(float64(missing)))
			g.Expect(m.value("toolledger_action_duration_seconds", unresolved)).To(Equal(float64(missing)))
		}).Should(Succeed())
	})
})
