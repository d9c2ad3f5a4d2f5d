package ledgerclient

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

func TestDescribeGetError(t *testing.T) {
	resource := schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: resourceActions}
	missing := describeGetError(apierrors.NewNotFound(resource, "order-1"), "ToolAction", "shop", "order-1")
	if got, want := missing.Error(), `ToolAction "order-1" not found in namespace "shop"`; got != want {
		t.Errorf("missing object: %q, want %q", got, want)
	}
	// What client-go makes of a 404 that is not an API status: no such resource.
	unserved := apierrors.NewGenericServerResponse(http.StatusNotFound, http.MethodGet, resource, "order-1", "404 page not found", 0, true)
	if got := describeGetError(unserved, "ToolAction", "shop", "order-1").Error(); !strings.Contains(got, "is toolledger installed") {
		t.Errorf("unserved resource: %q, want a hint that toolledger is not installed", got)
	}
	forbidden := apierrors.NewForbidden(resource, "order-1", errors.New("no"))
	if err := describeGetError(forbidden, "ToolAction", "shop", "order-1"); !apierrors.IsForbidden(err) {
		t.Errorf("forbidden: %v, want the API error wrapped", err)
	}
}
