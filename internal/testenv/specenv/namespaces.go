package specenv

import (
	"context"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// DeleteNamespace deletes namespace as the namespace controller, which a
// control plane of kube-apiserver and etcd alone does not run, would: the
// namespace is marked for deletion, its ToolActions, Tools and decisions
// are deleted (a manager keeps each dispatched record before it lets its
// finalizer go), and once they are gone the namespace is finalized and
// leaves the API server. Its name may then be created again: another life.
func (e *Env) DeleteNamespace(namespace string) {
	ginkgo.GinkgoHelper()
	ctx := context.Background()
	ns := &corev1.Namespace{}
	gomega.Expect(e.Client.Get(ctx, client.ObjectKey{Name: namespace}, ns)).To(gomega.Succeed())
	gomega.Expect(e.Client.Delete(ctx, ns)).To(gomega.Succeed())
	for _, list := range []client.ObjectList{&v1alpha1.ToolActionList{}, &v1alpha1.ToolList{}, &v1alpha1.EarlierLifeDecisionList{}} {
		gomega.Expect(e.Client.List(ctx, list, client.InNamespace(namespace))).To(gomega.Succeed())
		items, err := apimeta.ExtractList(list)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		for _, item := range items {
			gomega.Expect(client.IgnoreNotFound(e.Client.Delete(ctx, item.(client.Object)))).To(gomega.Succeed())
		}
	}
	gomega.Eventually(func(g gomega.Gomega) {
		var left v1alpha1.ToolActionList
		g.Expect(e.Client.List(ctx, &left, client.InNamespace(namespace))).To(gomega.Succeed())
		g.Expect(left.Items).To(gomega.BeEmpty(), "the ToolActions a manager has not kept yet")
	}).Should(gomega.Succeed())
	clientset, err := kubernetes.NewForConfig(e.Config)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	gomega.Expect(e.Client.Get(ctx, client.ObjectKey{Name: namespace}, ns)).To(gomega.Succeed())
	ns.Spec.Finalizers = nil
	_, err = clientset.CoreV1().Namespaces().Finalize(ctx, ns, metav1.UpdateOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	gomega.Eventually(func() bool {
		return apierrors.IsNotFound(e.Client.Get(ctx, client.ObjectKey{Name: namespace}, &corev1.Namespace{}))
	}).Should(gomega.BeTrue())
}

// CreateNamespace creates namespace under its name, and returns its uid.
func (e *Env) CreateNamespace(namespace string) string {
	ginkgo.GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	gomega.Expect(e.Client.Create(context.Background(), ns)).To(gomega.Succeed())
	return string(ns.UID)
}
