package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/archive"
	"github.com/toolledger/toolledger/internal/archivebinding"
	"github.com/toolledger/toolledger/internal/keyhistory"
	"github.com/toolledger/toolledger/internal/toolcontract"
)

// attemptFacts is what the decision about an attempt reads, all read
// before the rules decide (rules.beforeConnect). Reading stops early in one
// case: a tool whose schema is refused leaves the parameters, up to 1 MiB,
// unread.
type attemptFacts struct {
	// refused is why the tool's schema or the request cannot be used: an
	// *invalidError rejects the action; another error is retried.
	refused       error
	requestDigest string
	parameters    json.RawMessage
	// earlier is the key's earlier record, read for a first attempt only;
	// nil when it has none.
	earlier *earlierRecord
	// unchecked is why the archive could not check the key: the action
	// waits, and is never dispatched unchecked.
	unchecked error
	// behind is why the archive cannot be trusted with the key: it lost
	// records of the namespace that left etcd. The action waits until it
	// catches up, or an operator acknowledges the loss.
	behind error
	// earlierLife is why an earlier life of the namespace holds the key:
	// the action waits until a person decides about that life.
	earlierLife error
	// unbound is why this manager must not check the key at all: the
	// ledger keeps its keys in an archive it does not use.
	unbound error
	// original is what a compensation's original shows; nil for an action
	// that compensates nothing.
	original *compensated
	// target is what the tool names now, and targetErr why it cannot be
	// digested.
	target    v1alpha1.TargetRecord
	targetErr error
}

// compensated is what a compensation's original shows: its record, or,
// once that left etcd, what its key's history kept of it; neither when
// both are gone.
type compensated struct {
	name   string
	record *v1alpha1.ToolAction
	kept   *earlierRecord
}

// readAttemptFacts reads what the decision about an attempt needs, and
// returns the action with its parameters. An error is a read that failed,
// retried with backoff.
func (r *ToolActionReconciler) readAttemptFacts(ctx context.Context, action *v1alpha1.ToolAction, tool *v1alpha1.Tool) (*v1alpha1.ToolAction, attemptFacts, error) {
	var (
		f      attemptFacts
		schema *toolcontract.Schema
	)
	if schema, f.refused = toolContract(tool); f.refused != nil {
		return action, f, nil //nolint:nilerr // a refused schema is a fact for the rules, not a failed read
	}
	action, err := r.withParameters(ctx, action)
	if err != nil {
		return nil, f, err
	}
	f.requestDigest, f.parameters, f.refused = verifyRequest(action, tool, schema)
	if action.Status.Attempts == 0 {
		var refused *archivebinding.RefusedError
		switch err := r.Binding.Check(ctx); {
		case errors.As(err, &refused):
			f.unbound = err
		case err != nil:
			return nil, f, err
		}
		var earlier *keyhistory.Earlier
		earlier, err = r.History.Earlier(ctx, action, tool)
		f.earlier = earlierFrom(earlier)
		var earlierLife *keyhistory.EarlierLifeError
		switch {
		case errors.Is(err, archive.ErrUnavailable):
			f.unchecked = err
		case errors.Is(err, archive.ErrBehind):
			f.behind = err
		case errors.As(err, &earlierLife):
			f.earlierLife = err
		case err != nil:
			return nil, f, err
		}
	}
	if action.Spec.Compensates != "" {
		if f.original, err = r.compensatedBy(ctx, action); err != nil {
			return nil, f, err
		}
	}
	f.target, f.targetErr = targetOf(action, tool)
	return action, f, nil
}

// compensatedBy reads the original of a compensation: its record, confirmed
// with the API server when the cache lacks it, else what its key's history
// kept of it.
func (r *ToolActionReconciler) compensatedBy(ctx context.Context, action *v1alpha1.ToolAction) (*compensated, error) {
	key := types.NamespacedName{Namespace: action.Namespace, Name: action.Spec.Compensates}
	c := &compensated{name: key.Name}
	var original v1alpha1.ToolAction
	switch err := r.getConfirmed(ctx, key, &original); {
	case err == nil:
		c.record = &original
		return c, nil
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("cannot get ToolAction %s: %w", key, err)
	}
	kept, err := r.History.Settled(ctx, key)
	c.kept = earlierFrom(kept)
	return c, err
}
