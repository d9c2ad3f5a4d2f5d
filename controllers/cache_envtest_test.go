package controllers_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/testenv"
)

var _ = Describe("The manager's cache", func() {
	It("holds the active actions only, without their managed fields", func() {
		ctx, cancel := context.WithCancel(context.Background())
		DeferCleanup(cancel)
		opts := app.CacheOptions(app.DefaultNamespace())
		opts.Scheme = app.Scheme()
		informers, err := cache.New(cfg, opts)
		Expect(err).NotTo(HaveOccurred())
		go func() {
			defer GinkgoRecover()
			Expect(informers.Start(ctx)).To(Succeed())
		}()
		// The ToolAction informer starts on first use, once the cache runs.
		Eventually(func() error { return informers.List(ctx, &v1alpha1.ToolActionList{}) }).Should(Succeed())

		ns := env.NewTenant()
		newTool(ns)
		createTool(ns, "charge-approved", testenv.WithApprovalRequired())
		Expect(k8s.Create(ctx, newAction(ns, "order-held", "charge-approved", charge(1)))).To(Succeed())
		Expect(k8s.Create(ctx, newAction(ns, "order-finished", "charge", charge(2)))).To(Succeed())
		env.WaitForPhase(ns, "order-finished", v1alpha1.PhaseSucceeded)
		Expect(env.WaitForPhase(ns, "order-held", v1alpha1.PhaseAwaitingApproval).ManagedFields).NotTo(BeEmpty())

		Eventually(func(g Gomega) {
			var cached v1alpha1.ToolActionList
			g.Expect(informers.List(ctx, &cached, client.InNamespace(ns))).To(Succeed())
			g.Expect(cached.Items).To(HaveLen(1))
			g.Expect(cached.Items[0].Name).To(Equal("order-held"))
			g.Expect(cached.Items[0].ManagedFields).To(BeEmpty())
		}).Should(Succeed())
	})
})
