package testenv

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/controllers"
)

// LiveMembers counts the managers' member Leases in the operator namespace
// renewed within the last duration: the managers sharing the actions.
func LiveMembers(ctx context.Context, c client.Reader, duration time.Duration) (int, error) {
	var leases coordinationv1.LeaseList
	if err := c.List(ctx, &leases, client.InNamespace(app.DefaultNamespace()), client.MatchingLabels{controllers.MemberLabel: "true"}); err != nil {
		return 0, err
	}
	live := 0
	for _, l := range leases.Items {
		if l.Spec.RenewTime != nil && time.Since(l.Spec.RenewTime.Time) < duration {
			live++
		}
	}
	return live, nil
}
