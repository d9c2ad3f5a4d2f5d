// Package identitytest builds what the front ends' tests need of
// internal/identity without an API server.
package identitytest

import (
	"context"

	authenticationv1 "k8s.io/api/authentication/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/toolledger/toolledger/internal/identity"
)

// ReviewerAs is a Reviewer for audience whose every TokenReview answers
// that the token is user's.
func ReviewerAs(audience string, user authenticationv1.UserInfo) *identity.Reviewer {
	kube := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Create: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
			review := obj.(*authenticationv1.TokenReview)
			review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: user, Audiences: review.Spec.Audiences}
			return nil
		},
	}).Build()
	return identity.NewReviewer(kube, audience, nil)
}
