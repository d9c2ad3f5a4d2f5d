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
	if err := b.admissionPolicy(ctx, "outcome_finalizer_policy.yaml", on); err != nil {
		return err
	}
	if err := b.c.namespace(ctx, b.fastTool("policy-probe")); err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		probe := &v1alpha1.ToolAction{
			ObjectMeta: metav1.ObjectMeta{Namespace: "policy-probe", Name: "probe"},
			Spec:       spec(1),
		}
		// Just after the CRDs are installed the API server may not serve
		// ToolActions yet; that is retried like a policy not yet loaded.
		err := b.c.k8s.Create(ctx, probe, client.DryRunAll)
		if err == nil && slices.Contains(probe.Finalizers, v1alpha1.Finalizer) == on {
			b.policyOn = &on
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("cannot probe the admission policy: %w", err)
			}
			return errors.New("the API server did not take up the admission policy change within a minute")
		}
		if err := testenv.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// useParametersPolicy installs or removes config/admission's parameters
// policy and waits until the API server applies the change: a server-side
// dry run of an action with parameters is refused, or is not.
func (b *bench) useParametersPolicy(ctx context.Context, namespace string, parameters map[string]apiextensionsv1.JSON, on bool) error {
	if err := b.admissionPolicy(ctx, "parameters_policy.yaml", on); err != nil {
		return err
	}
	for deadline := time.Now().Add(time.Minute); ; {
		probe := &v1alpha1.ToolAction{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "probe"},
			Spec: v1alpha1.ToolActionSpec{ToolRef: v1alpha1.ToolReference{Name: toolName}, Parameters: parameters}}
		err := b.c.k8s.Create(ctx, probe, client.DryRunAll)
		refused := apierrors.IsInvalid(err)
		if err != nil && !refused {
			return fmt.Errorf("cannot probe the parameters policy: %w", err)
		}
		if refused == on {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the API server did not take up the parameters policy change within a minute")
		}
		if err := testenv.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// admissionPolicy installs config/admission's file, or removes it.
func (b *bench) admissionPolicy(ctx context.Context, file string, on bool) error {
	path := filepath.Join(b.root, "config", "admission", file)
	if on {
		return testenv.ApplyFile(ctx, b.c.cfg, path, "toolledger-bench")
	}
	return testenv.DeleteFile(ctx, b.c.cfg, path)
}
