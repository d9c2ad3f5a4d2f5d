package ledgerclient

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

func TestBuildToolQueueCountsPerNamespaceAndTool(t *testing.T) {
	onCluster := func(a v1alpha1.ToolAction) v1alpha1.ToolAction {
		a.Spec.ToolRef = v1alpha1.ToolReference{Kind: v1alpha1.KindClusterTool, Name: "notify"}
		return a
	}
	executing := queued("shop", "e1", v1alpha1.PhaseExecuting, -time.Minute, nil)
	// Listed again once it finished its attempt and was retried: it counts
	// once, as last listed.
	retried := executing
	retried.Status.Phase = v1alpha1.PhaseRetryScheduled
	actions := []v1alpha1.ToolAction{
		executing,
		queued("shop", "e2", v1alpha1.PhaseExecuting, -time.Minute, nil),
		queued("shop", "a1", v1alpha1.PhaseAccepted, -time.Minute, nil),
		queued("shop", "a2", v1alpha1.PhaseAccepted, -time.Minute, nil),
		queued("shop", "a3", v1alpha1.PhaseAccepted, -time.Minute, nil),
		queued("shop", "w1", v1alpha1.PhaseAwaitingApproval, -time.Minute, nil),
		queued("shop", "u1", v1alpha1.PhaseUnknown, -time.Minute, timePtr(-time.Minute)),
		retried,
		onCluster(queued("shop", "n1", v1alpha1.PhaseAccepted, -time.Minute, nil)),
		onCluster(queued("billing", "n2", v1alpha1.PhaseEscalated, -time.Minute, nil)),
	}
	charge := toolUse{namespace: "shop", ref: v1alpha1.ToolReference{Kind: v1alpha1.KindTool, Name: "charge"}}
	limits := map[toolUse]*v1alpha1.DispatchLimits{charge: {MaxInFlight: 2, RequestsPerSecond: 10}}

	got := buildToolQueue(lastSightings(actions), limits)
	want := []ToolQueueItem{
		{Namespace: "billing", Tool: "ClusterTool/notify", Escalated: 1},
		{Namespace: "shop", Tool: "ClusterTool/notify", Accepted: 1},
		{Namespace: "shop", Tool: "charge", Executing: 1, Accepted: 3, AwaitingApproval: 1, RetryScheduled: 1, Unknown: 1, Limits: limits[charge]},
	}
	if diff := cmp.Diff(want, got.Items); diff != "" {
		t.Fatalf("buildToolQueue (-want +got):\n%s", diff)
	}

}
