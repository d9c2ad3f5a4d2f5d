package integration

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/adapter/kubernetesapply"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/pkg/adapter"
)

// The product brief's failure table: "the effect's object is gone when
// looked up (TTL, GC)": absence proves nothing unless the class says so;
// the action is escalated, never applied again blindly.
var _ = Describe("A kubernetesApply object gone because it applied", func() {
	It("escalates a Job deleted by its TTL after a lost answer instead of creating it again", func() {
		ctx := context.Background()
		ns := env.NewTenant()
		grantJobs(ns, "runner")

		// Each apply goes through; the answer is lost and the Job, having
		// run, is removed at once, as ttlSecondsAfterFinished: 0 does.
		var applies atomic.Int32
		managerConfig := testenv.AsManager(env.Config)
		connector, err := kubernetesapply.New(managerConfig)
		Expect(err).NotTo(HaveOccurred())
		lostAnswer := adapter.Wrap(connector, func(_ *v1alpha1.Tool, inner adapter.Executor) adapter.Executor {
			return adapter.ExecutorFns{
				ExecuteFn: func(ctx context.Context, req adapter.Request) (adapter.Outcome, error) {
					outcome, err := inner.Execute(ctx, req)
					if err != nil {
						return outcome, err
					}
					applies.Add(1)
					job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "report-7"}}
					Expect(k8s.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
					return adapter.Outcome{}, &adapter.AmbiguousError{Reason: "Timeout", Err: errors.New("the answer was lost")}
				},
				LookupFn: inner.Lookup,
			}
		})
		registry, err := adapter.NewRegistry(lostAnswer)
		Expect(err).NotTo(HaveOccurred())
		stop, err := testenv.StartManager(managerConfig, app.Options{ExecutorID: "absence", LeaseGrace: time.Second, Adapters: registry})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { _ = stop() })

		// The API server counts the Jobs created.
		watcher, err := client.NewWithWatch(env.Config, client.Options{})
		Expect(err).NotTo(HaveOccurred())
		jobs, err := watcher.Watch(ctx, &batchv1.JobList{}, client.InNamespace(ns))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(jobs.Stop)
		var created atomic.Int32
		go func() {
			for e := range jobs.ResultChan() {
				if e.Type == watch.Added {
					created.Add(1)
				}
			}
		}()

		Expect(k8s.Create(ctx, &v1alpha1.Tool{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "report"},
			Spec: v1alpha1.ToolSpec{
				Operation: "reports.run", Version: "v1", IdempotencyClass: v1alpha1.Compensatable,
				UnknownOutcomeDeadline: &metav1.Duration{Duration: 3 * time.Second},
				Retry:                  v1alpha1.RetryPolicy{InitialBackoff: &metav1.Duration{Duration: 200 * time.Millisecond}},
				KubernetesApply: &v1alpha1.KubernetesApplyAdapter{ServiceAccountName: "runner", Template: apiextensionsv1.JSON{Raw: []byte(
					`{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "{{name}}"}, "spec": {"ttlSecondsAfterFinished": 0,
					  "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "run", "image": "example.invalid/report:1"}]}}}}`)}},
			},
		})).To(Succeed())
		Expect(k8s.Create(ctx, &v1alpha1.ToolAction{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "report-7"},
			Spec: v1alpha1.ToolActionSpec{ToolRef: v1alpha1.ToolReference{Name: "report"},
				Parameters: map[string]apiextensionsv1.JSON{"name": {Raw: []byte(`"report-7"`)}}},
		})).To(Succeed())

		escalated := env.WaitForPhase(ns, "report-7", v1alpha1.PhaseEscalated)
		Expect(escalated.Status.Attempts).To(Equal(int32(1)))
		Expect(escalated.Status.Error.Message).To(ContainSubstring("no lookup proved the outcome of attempt 1 within the tool's deadline of 3s"))
		Expect(escalated.Status.Error.Message).To(ContainSubstring("jobs.batch/" + ns + "/report-7 does not exist, which proves nothing for a tool of this class"))
		Consistently(created.Load, time.Second, 100*time.Millisecond).Should(Equal(int32(1)), "Jobs created by the API server")
		Expect(applies.Load()).To(Equal(int32(1)))
	})
})

// grantJobs creates the ServiceAccount account with what server-side apply
// and a lookup of Jobs need.
func grantJobs(namespace, account string) {
	GinkgoHelper()
	ctx := context.Background()
	Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: account}})).To(Succeed())
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: account + "-jobs"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"get", "create", "patch"}}},
	}
	Expect(k8s.Create(ctx, role)).To(Succeed())
	Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: account, Namespace: namespace}},
	})).To(Succeed())
}
