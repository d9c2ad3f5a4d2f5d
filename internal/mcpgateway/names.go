package mcpgateway

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/toolledger/toolledger/internal/ledgerclient"
)

// recordedName is the name of the action a caller's key addresses. Names
// are scoped by what the caller addressed (its name, the tool's name and
// the key), so a retry meets its intent whether a Tool or a same-named
// ClusterTool answers the name now. A key sent for a ClusterTool while the
// tool's kind was part of the scope was named issuedForClusterTool: while
// any record of that name exists (in etcd, a Tombstone or the archive),
// the key keeps it. Only a gateway that serves ClusterTools can hold such
// keys, so only it looks. An error means the gateway cannot tell; nothing
// may be recorded then (nameRefused says how to answer).
func (g *Gateway) recordedName(ctx context.Context, caller *caller, name, issuedForClusterTool string) (string, error) {
	if !g.opts.ClusterTools {
		return name, nil
	}
	ctx, ns := caller.acting(ctx), g.opts.Namespace
	if live, err := g.records.FindAction(ctx, ns, name); err != nil || live != nil {
		return name, err
	}
	earlier, err := g.recordOf(ctx, ns, issuedForClusterTool)
	if err != nil {
		return "", fmt.Errorf("cannot tell whether the key was issued for a ClusterTool as %s: %w", issuedForClusterTool, err)
	}
	if earlier {
		return issuedForClusterTool, nil
	}
	return name, nil
}

// recordOf reports whether the ledger holds a record of the name: a
// ToolAction in etcd, its Tombstone, or an archived record.
func (g *Gateway) recordOf(ctx context.Context, namespace, name string) (bool, error) {
	if live, err := g.records.FindAction(ctx, namespace, name); err != nil || live != nil {
		return live != nil, err
	}
	if kept, err := g.records.FindTombstone(ctx, namespace, name); err != nil || kept != nil {
		return kept != nil, err
	}
	archived, err := g.records.FindArchived(ctx, namespace, name)
	if errors.Is(err, ledgerclient.ErrNoArchiveAPI) {
		return false, nil
	}
	return archived != nil, err
}

// nameRefused is the answer when the gateway cannot tell a key's name: the
// caller may not read the key's records (so could not read its outcome
// either), or the ledger is out of reach.
func nameRefused(err error) answer {
	if apierrors.IsForbidden(err) {
		return answer{verdict: verdictForbidden, err: err}
	}
	return answer{verdict: verdictUnavailable, err: err}
}
