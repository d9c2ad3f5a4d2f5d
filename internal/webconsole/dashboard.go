package webconsole

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/ledgerclient"
)

type dashboardPage struct {
	Namespace string
	Phases    []v1alpha1.Phase
	Rows      []countRow
	Totals    countRow
	Error     string
}

// countRow counts one tool's actions by phase, in the order of Phases.
type countRow struct {
	Namespace string
	Tool      string
	Counts    []int
	Total     int
}

// dashboardPhases are the columns of the dashboard, in lifecycle order.
var dashboardPhases = []v1alpha1.Phase{
	v1alpha1.PhasePending, v1alpha1.PhaseAccepted, v1alpha1.PhaseAwaitingApproval, v1alpha1.PhaseExecuting,
	v1alpha1.PhaseRetryScheduled, v1alpha1.PhaseUnknown, v1alpha1.PhaseEscalated, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed,
}

// dashboardPage counts the actions of the namespace by tool and phase.
func (s *Server) dashboardPage(w http.ResponseWriter, r *http.Request, u *user) {
	page := dashboardPage{Namespace: s.namespaceOf(r), Phases: dashboardPhases}
	if page.Error = validNamespace(page.Namespace); page.Error != "" {
		s.render(w, http.StatusBadRequest, "dashboard", s.pageData(r, u, "Dashboard", page))
		return
	}
	actions, err := u.ledger.ListActions(r.Context(), listScope(page.Namespace), "")
	if err != nil {
		page.Error = err.Error()
		s.render(w, apiStatus(err), "dashboard", s.pageData(r, u, "Dashboard", page))
		return
	}
	page.Rows, page.Totals = countByTool(actions)
	s.render(w, http.StatusOK, "dashboard", s.pageData(r, u, "Dashboard", page))
}

func countByTool(actions []v1alpha1.ToolAction) ([]countRow, countRow) {
	index := map[string]int{}
	var rows []countRow
	totals := countRow{Tool: "all tools", Counts: make([]int, len(dashboardPhases))}
	for i := range actions {
		a := &actions[i]
		tool := ledgerclient.ToolName(a.Spec.ToolRef)
		key := fmt.Sprintf("%s/%s", a.Namespace, tool)
		at, seen := index[key]
		if !seen {
			at = len(rows)
			index[key] = at
			rows = append(rows, countRow{Namespace: a.Namespace, Tool: tool, Counts: make([]int, len(dashboardPhases))})
		}
		column := slices.Index(dashboardPhases, ledgerclient.PhaseOf(a))
		if column < 0 {
			continue
		}
		rows[at].Counts[column]++
		rows[at].Total++
		totals.Counts[column]++
		totals.Total++
	}
	slices.SortFunc(rows, func(a, b countRow) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Tool, b.Tool))
	})
	return rows, totals
}
