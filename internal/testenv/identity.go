package testenv

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// identityPolicy names both identity policies of
// config/admission/identity_policy.yaml.
const identityPolicy = "toolledger-identity"

// WaitForIdentity returns once the API server stamps c's user on a new
// ToolAction and refuses one that names somebody else, as
// config/admission/identity_policy.yaml has it. It probes with server-side
// dry runs, which store nothing.
func WaitForIdentity(ctx context.Context, c client.Client, namespace string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		stamped, err := probeIdentity(ctx, c, namespace, nil)
		switch {
		case err != nil:
		case stamped.Annotations[v1alpha1.RequestedByAnnotation] == "":
			err = errors.New("a new ToolAction is not stamped")
		default:
			_, err = probeIdentity(ctx, c, namespace, map[string]string{v1alpha1.RequestedByAnnotation: "identity-probe-somebody-else"})
			if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+identityPolicy+"'") {
				return nil
			}
			if err == nil {
				err = errors.New("a ToolAction naming somebody else is admitted")
			}
		}
		if sleepErr := Sleep(ctx, 100*time.Millisecond); sleepErr != nil {
			return fmt.Errorf("the API server does not enforce %s yet: %w", identityPolicy, err)
		}
	}
}

// probeIdentity creates, in a server-side dry run that stores nothing, a
// ToolAction with annotations, and returns it as admission left it.
func probeIdentity(ctx context.Context, c client.Client, namespace string, annotations map[string]string) (*v1alpha1.ToolAction, error) {
	action := &v1alpha1.ToolAction{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "identity-probe", Annotations: annotations},
		Spec:       v1alpha1.ToolActionSpec{ToolRef: v1alpha1.ToolReference{Name: "identity-probe"}},
	}
	return action, c.Create(ctx, action, client.DryRunAll)
}

// InstallIdentityPolicy applies config/admission/identity_policy.yaml and
// waits until the API server enforces it on c's user. remove deletes it
// and waits until new ToolActions are no longer stamped, so that what
// runs next meets a cluster without it.
func InstallIdentityPolicy(ctx context.Context, cfg *rest.Config, c client.Client, namespace, owner string) (remove func() error, err error) {
	path := filepath.Join(repoRoot(), "config", "admission", "identity_policy.yaml")
	if err := ApplyFile(ctx, cfg, path, owner); err != nil {
		return nil, err
	}
	remove = func() error {
		if err := DeleteFile(ctx, cfg, path); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		for {
			probe, err := probeIdentity(ctx, c, namespace, nil)
			if err == nil && probe.Annotations[v1alpha1.RequestedByAnnotation] == "" {
				return nil
			}
			if err == nil {
				err = errors.New("a new ToolAction is still stamped")
			}
			if sleepErr := Sleep(ctx, 100*time.Millisecond); sleepErr != nil {
				return fmt.Errorf("%s was deleted, but the API server does not forget it: %w", identityPolicy, err)
			}
		}
	}
	if err := WaitForIdentity(ctx, c, namespace); err != nil {
		return nil, errors.Join(err, remove())
	}
	return remove, nil
}
