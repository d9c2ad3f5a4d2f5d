package testenv

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// The identities config/admission/tombstone_guard_policy.yaml exempts.
const (
	// ManagerUser is the user of the manager's ServiceAccount as
	// config/rbac/service_account.yaml installs it.
	ManagerUser = "system:serviceaccount:toolledger-system:toolledger-controller-manager"
	// BreakGlassGroup is the group of the administrators the guard lets
	// remove a finalizer or delete a tombstone.
	BreakGlassGroup = "toolledger:break-glass"
)

// The guard's policies, named in the API server's refusals.
const (
	actionGuardPolicy    = "toolledger-action-guard"
	tombstoneGuardPolicy = "toolledger-tombstone-guard"
)

// AsManager is cfg impersonating ManagerUser, so that a manager a harness
// runs is exempt from the guard as the deployed one is. The groups keep
// cfg's admin rights; an admin in system:masters may impersonate them.
func AsManager(cfg *rest.Config) *rest.Config {
	manager := rest.CopyConfig(cfg)
	manager.Impersonate = rest.ImpersonationConfig{UserName: ManagerUser, Groups: []string{"system:masters", "system:authenticated"}}
	return manager
}

// WaitForGuard returns once the API server enforces both guard policies on
// c's user, who must not be exempt: the API server loads a new policy
// within moments. It probes with server-side dry runs, which store nothing.
func WaitForGuard(ctx context.Context, c client.Client, namespace string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	probes := map[string]func() error{
		actionGuardPolicy: func() error {
			return c.Create(ctx, &v1alpha1.ToolAction{
				ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "guard-probe", OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "v1", Kind: "ConfigMap", Name: "guard-probe", UID: "00000000-0000-0000-0000-000000000000",
				}}},
				Spec: v1alpha1.ToolActionSpec{ToolRef: v1alpha1.ToolReference{Name: "guard-probe"}},
			}, client.DryRunAll)
		},
		tombstoneGuardPolicy: func() error {
			now := metav1.Now()
			return c.Create(ctx, &v1alpha1.Tombstone{
				ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "guard-probe"},
				Record: v1alpha1.TombstoneRecord{ActionUID: "00000000-0000-0000-0000-000000000000", RequestDigest: "sha256:0",
					Phase: v1alpha1.PhaseSucceeded, CompletionTime: now, ToolRef: v1alpha1.ToolReference{Name: "guard-probe"},
					Cause: v1alpha1.TombstoneCauseDeleted, DeletionTime: now},
			}, client.DryRunAll)
		},
	}
	for policy, probe := range probes {
		for {
			last := probe()
			if apierrors.IsForbidden(last) && strings.Contains(last.Error(), "ValidatingAdmissionPolicy '"+policy+"'") {
				break
			}
			if err := Sleep(ctx, 100*time.Millisecond); err != nil {
				if last == nil {
					return fmt.Errorf("the API server does not enforce %s yet: it admitted a probe", policy)
				}
				return fmt.Errorf("the API server does not enforce %s yet: %w", policy, last)
			}
		}
	}
	return nil
}
