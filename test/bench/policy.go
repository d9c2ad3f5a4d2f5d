package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/testenv"
)

// usePolicy installs or removes config/admission's MutatingAdmissionPolicy,
// which sets the outcome finalizer on every ToolAction at creation, and
// waits until the API server applies the change (a server-side dry run of a
// create shows it). It is installed as shipped; only the configuration
// measuring manifests without it removes it.
func (b *bench) usePolicy(ctx context.Context, on bool) error {
	if b.policyOn != nil && *b.policyOn == on {
		return nil
	}
	if err := b.c.namespace(ctx, b.fastTool("policy-probe")); err != nil {
		return err
	}
	var probeErr error
	err := b.switchPolicy(ctx, "outcome_finalizer_policy.yaml", on, func(ctx context.Context) (bool, error) {
		probe := &v1alpha1.ToolAction{
			ObjectMeta: metav1.ObjectMeta{Namespace: "policy-probe", Name: "probe"},
			Spec:       spec(1),
		}
		// Just after the CRDs are installed the API server may not serve
		// ToolActions yet; that is retried like a policy not yet loaded.
		probeErr = b.c.k8s.Create(ctx, probe, client.DryRunAll)
		return probeErr == nil && slices.Contains(probe.Finalizers, v1alpha1.Finalizer) == on, nil
	})
	if err != nil {
		return errors.Join(err, probeErr)
	}
	b.policyOn = &on
	return nil
}

// useParametersPolicy installs or removes config/admission's parameters
// policy and waits until the API server applies the change: a server-side
// dry run of an action with parameters is refused, or is not.
func (b *bench) useParametersPolicy(ctx context.Context, namespace string, parameters map[string]apiextensionsv1.JSON, on bool) error {
	return b.switchPolicy(ctx, "parameters_policy.yaml", on, func(ctx context.Context) (bool, error) {
		probe := &v1alpha1.ToolAction{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "probe"},
			Spec: v1alpha1.ToolActionSpec{ToolRef: v1alpha1.ToolReference{Name: toolName}, Parameters: parameters}}
		err := b.c.k8s.Create(ctx, probe, client.DryRunAll)
		refused := apierrors.IsInvalid(err)
		if err != nil && !refused {
			return false, fmt.Errorf("cannot probe the parameters policy: %w", err)
		}
		return refused == on, nil
	})
}

// switchPolicy installs config/admission's file, or removes it, and polls
// applied, a minute at most, until the API server has taken up the change.
func (b *bench) switchPolicy(ctx context.Context, file string, on bool, applied wait.ConditionWithContextFunc) error {
	path := filepath.Join(b.root, "config", "admission", file)
	var err error
	if on {
		err = testenv.ApplyFile(ctx, b.c.cfg, path, "toolledger-bench")
	} else {
		err = testenv.DeleteFile(ctx, b.c.cfg, path)
	}
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, applied)
	if wait.Interrupted(err) && ctx.Err() == nil {
		return fmt.Errorf("the API server did not take up the change of config/admission/%s within a minute", file)
	}
	return err
}
