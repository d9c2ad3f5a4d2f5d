package testenv

import (
	"context"
	"fmt"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/shard"
)

// CreateOperatorNamespace creates the operator namespace, which holds the
// managers' member Leases, as the manifests install it; one that exists
// is left as it is.
func CreateOperatorNamespace(ctx context.Context, c client.Client) error {
	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: app.DefaultNamespace()}}
	if err := c.Create(ctx, namespace); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("cannot create the operator namespace %s: %w", namespace.Name, err)
	}
	return nil
}

// LiveMembers counts the managers' member Leases in the operator namespace
// renewed within the last duration: the managers sharing the actions.
func LiveMembers(ctx context.Context, c client.Reader, duration time.Duration) (int, error) {
	live, err := LiveMemberIdentities(ctx, c, duration)
	return len(live), err
}

// LiveMemberIdentities are the identities (executor IDs) of those managers,
// sorted.
func LiveMemberIdentities(ctx context.Context, c client.Reader, duration time.Duration) ([]string, error) {
	var leases coordinationv1.LeaseList
	if err := c.List(ctx, &leases, client.InNamespace(app.DefaultNamespace()), client.MatchingLabels{shard.MemberLabel: "true"}); err != nil {
		return nil, err
	}
	var live []string
	for _, l := range leases.Items {
		if l.Spec.RenewTime != nil && time.Since(l.Spec.RenewTime.Time) < duration && l.Spec.HolderIdentity != nil {
			live = append(live, *l.Spec.HolderIdentity)
		}
	}
	slices.Sort(live)
	return live, nil
}
