package webconsole

import (
	"net/http"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

type toolsPage struct {
	Namespace string
	Tools     []toolRow
	Error     string
	// ClusterToolsError says why ClusterTools are not listed (a
	// namespace-bound role cannot list them).
	ClusterToolsError string
}

type toolRow struct {
	Kind, Namespace, Name string
	Operation, Version    string
	Class                 v1alpha1.IdempotencyClass
	Adapter               string
	MaxInFlight, PerSec   int32
	ApprovalRequired      bool
	KeyRetention          string
	Ready                 string
	ReadyMessage          string
}

// toolsPage lists the catalog: each tool's class, adapter, limits, approval
// and readiness.
func (s *Server) toolsPage(w http.ResponseWriter, r *http.Request, u *user) {
	page := toolsPage{Namespace: s.namespaceOf(r)}
	status := http.StatusOK
	if page.Error = validNamespace(page.Namespace); page.Error != "" {
		s.render(w, http.StatusBadRequest, "tools", s.pageData(r, u, "Tools", page))
		return
	}
	tools, err := u.ledger.ListTools(r.Context(), listScope(page.Namespace))
	if err != nil {
		status, page.Error = apiStatus(err), err.Error()
	}
	for i := range tools {
		t := &tools[i]
		page.Tools = append(page.Tools, toolRowOf(v1alpha1.KindTool, t.Namespace, t.Name, &t.Spec, &t.Status))
	}
	clusterTools, err := u.ledger.ListClusterTools(r.Context())
	if err != nil {
		page.ClusterToolsError = err.Error()
	}
	for i := range clusterTools {
		t := &clusterTools[i]
		page.Tools = append(page.Tools, toolRowOf(v1alpha1.KindClusterTool, "", t.Name, &t.Spec.ToolSpec, &t.Status))
	}
	s.render(w, status, "tools", s.pageData(r, u, "Tools", page))
}

func toolRowOf(kind, namespace, name string, spec *v1alpha1.ToolSpec, status *v1alpha1.ToolStatus) toolRow {
	limits := spec.Limits.WithDefaults()
	row := toolRow{Kind: kind, Namespace: namespace, Name: name, Operation: spec.Operation, Version: spec.Version,
		Class: spec.IdempotencyClass, Adapter: v1alpha1.AdapterName(spec), MaxInFlight: limits.MaxInFlight, PerSec: limits.RequestsPerSecond,
		ApprovalRequired: spec.ApprovalRequired, KeyRetention: "until an administrator frees it", Ready: "Unknown"}
	if spec.KeyRetention != nil {
		row.KeyRetention = spec.KeyRetention.Duration.String()
	}
	if c := meta.FindStatusCondition(status.Conditions, v1alpha1.ConditionToolReady); c != nil {
		row.Ready, row.ReadyMessage = string(c.Status), c.Message
		if c.Reason != "" {
			row.Ready += " (" + c.Reason + ")"
		}
	}
	return row
}
