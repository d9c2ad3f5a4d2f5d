package mcpgateway

import (
	"context"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/identity"
)

// accessTTL is how long a caller's right to list the tools is trusted
// before the API server is asked again.
const accessTTL = 30 * time.Second

// maxAccessAnswers bounds the callers whose rights are kept.
const maxAccessAnswers = 1024

// access decides whether a caller may see the catalog: whoever may invoke
// its tools, that is create toolactions in the namespace. It asks the API
// server as the caller (a SelfSubjectAccessReview, impersonated, which the
// gateway needs no further right for) and keeps the answer for accessTTL.
type access struct {
	namespace string
	reviews   authorizationclient.SelfSubjectAccessReviewInterface
	now       func() time.Time
	answers   *identity.Cache[accessAnswer]
}

type accessAnswer struct {
	allowed bool
	expires time.Time
}

func newAccess(namespace string, reviews authorizationclient.SelfSubjectAccessReviewInterface) *access {
	return &access{namespace: namespace, reviews: reviews, now: time.Now, answers: identity.NewCache[accessAnswer](maxAccessAnswers)}
}

// mayInvoke reports whether c may create toolactions in the namespace.
func (a *access) mayInvoke(ctx context.Context, c *caller) (bool, error) {
	if c.user == nil {
		// The gateway's own identity: the API server decides each call.
		return true, nil
	}
	id, err := identity.ID(*c.user)
	if err != nil {
		return false, err
	}
	if answer, ok := a.answers.Get(id); ok && a.now().Before(answer.expires) {
		return answer.allowed, nil
	}
	review, err := a.reviews.Create(c.acting(ctx), &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: a.namespace, Verb: "create", Group: v1alpha1.GroupVersion.Group, Resource: "toolactions",
		},
	}}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("cannot ask the API server whether %s may invoke tools: %w", c.name, err)
	}
	a.answers.Put(id, accessAnswer{allowed: review.Status.Allowed, expires: a.now().Add(accessTTL)})
	return review.Status.Allowed, nil
}

// authorizeListing refuses tools/list to a caller who may not invoke the
// tools: the catalog (names, schemas, descriptions) is the namespace's,
// shown only to those who may use it.
func (g *Gateway) authorizeListing(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "tools/list" {
			return next(ctx, method, req)
		}
		c, err := g.callerOf(req.GetExtra())
		if err != nil {
			return nil, err
		}
		allowed, err := g.access.mayInvoke(ctx, c)
		if err != nil {
			return nil, err
		}
		if !allowed {
			return nil, fmt.Errorf("%s may not invoke tools in namespace %q (creating ToolActions is forbidden), so no tools are listed; ask the namespace's admin for the toolledger agent role",
				c.name, g.opts.Namespace)
		}
		return next(ctx, method, req)
	}
}
