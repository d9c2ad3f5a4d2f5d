package ledgerclient

import (
	"fmt"
	"time"

	archivev1alpha1 "github.com/toolledger/toolledger/api/archive/v1alpha1"
	"github.com/toolledger/toolledger/api/v1alpha1"
)

// DescribeCause says in words why a tombstone's record was deleted.
func DescribeCause(cause string) string {
	switch cause {
	case v1alpha1.TombstoneCauseDeleted:
		return cause + ": someone deleted the ToolAction (a user, a GitOps prune, the garbage collector)"
	case v1alpha1.TombstoneCauseRecordRetention:
		return cause + ": the tool's recordRetention passed"
	case v1alpha1.TombstoneCauseKeyRetention:
		return cause + ": the tool's keyRetention passed, and the key is free"
	default:
		return cause
	}
}

// ToolName names the tool an action refers to: its name, prefixed with its
// kind ("ClusterTool/charge") when that is not the default, Tool.
func ToolName(ref v1alpha1.ToolReference) string {
	if ref.KindOrDefault() == v1alpha1.KindTool {
		return ref.Name
	}
	return ref.Kind + "/" + ref.Name
}

// PhaseOf names the phase of an action the controller has not seen yet as
// Pending, as the controller itself does.
func PhaseOf(action *v1alpha1.ToolAction) v1alpha1.Phase {
	if action.Status.Phase == "" {
		return v1alpha1.PhasePending
	}
	return action.Status.Phase
}

// DescribeArchive says in words why and when an archived record left etcd,
// and whether it answers its key (until its tool's keyRetention passes).
func DescribeArchive(a *archivev1alpha1.ArchiveInfo) string {
	text := fmt.Sprintf("in the archive; left etcd %s (%s", a.DeletionTime.UTC().Format(time.RFC3339), DescribeCause(a.Cause))
	if a.DeletedBy != "" {
		text += ", by " + a.DeletedBy
	}
	text += ")"
	if a.GuardsKey {
		return text + "; it was dispatched, so it answers its key until the tool's keyRetention has passed since it finished"
	}
	return text + "; it answers no key (never dispatched, or archived after its key was freed)"
}
