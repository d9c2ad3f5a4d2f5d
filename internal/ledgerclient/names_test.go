package ledgerclient

import (
	"testing"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

func TestToolName(t *testing.T) {
	for ref, want := range map[v1alpha1.ToolReference]string{
		{Name: "charge"}:                      "charge",
		{Kind: "Tool", Name: "charge"}:        "charge",
		{Kind: "ClusterTool", Name: "charge"}: "ClusterTool/charge",
	} {
		if got := ToolName(ref); got != want {
			t.Errorf("ToolName(%+v) = %q, want %q", ref, got, want)
		}
	}
}
