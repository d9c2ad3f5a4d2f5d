package observability

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const dashboardFile = "config/grafana/toolledger.json"

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	SchemaVersion int     `json:"schemaVersion"`
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int        `json:"id"`
	Type       string     `json:"type"`
	Title      string     `json:"title"`
	Datasource *reference `json:"datasource"`
	Targets    []struct {
		Expr       string     `json:"expr"`
		Datasource *reference `json:"datasource"`
	} `json:"targets"`
	// Panels are a row's, when the row is collapsed.
	Panels []panel `json:"panels"`
}

type reference struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type variable struct {
	Type       string          `json:"type"`
	Name       string          `json:"name"`
	Query      json.RawMessage `json:"query"`
	Definition string          `json:"definition"`
	Datasource *reference      `json:"datasource"`
}

// query is a variable's query: a string, or {"query": "..."}.
func (v variable) query() string {
	var s string
	if json.Unmarshal(v.Query, &s) == nil {
		return s
	}
	var q struct {
		Query string `json:"query"`
	}
	if json.Unmarshal(v.Query, &q) == nil {
		return q.Query
	}
	return ""
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal(readFile(t, dashboardFile), &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// flatten returns every panel but rows, the panels of collapsed rows
// included.
func flatten(panels []panel) []panel {
	var out []panel
	for _, p := range panels {
		if p.Type == "row" {
			out = append(out, flatten(p.Panels)...)
			continue
		}
		out = append(out, p)
	}
	return out
}

// allPanels returns every panel, rows included, nested or not.
func allPanels(panels []panel) []panel {
	var out []panel
	for _, p := range panels {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// TestDashboardQueriesNameExportedMetrics: every metric a panel or a
// template variable queries is exported by the manager or the SDK (or
// registered by controller-runtime), and every toolledger metric labelled
// by namespace and tool is shown by at least one panel.
func TestDashboardQueriesNameExportedMetrics(t *testing.T) {
	d := readDashboard(t)
	exp := exported(t)

	type query struct{ where, expr string }
	var queries []query
	shown := map[string]bool{}
	for _, p := range flatten(d.Panels) {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, target := range p.Targets {
			if strings.TrimSpace(target.Expr) == "" {
				t.Errorf("panel %q has a target without expr", p.Title)
				continue
			}
			queries = append(queries, query{fmt.Sprintf("panel %q", p.Title), target.Expr})
			for _, name := range metricNames(target.Expr) {
				shown[name] = true
				for _, suffix := range seriesSuffixes {
					if base, ok := strings.CutSuffix(name, suffix); ok {
						shown[base] = true
					}
				}
			}
		}
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			queries = append(queries, query{fmt.Sprintf("variable %q", v.Name), v.query()})
			if v.Definition != "" {
				queries = append(queries, query{fmt.Sprintf("variable %q's definition", v.Name), v.Definition})
			}
		}
	}
	if len(queries) == 0 {
		t.Fatalf("%s has no query", dashboardFile)
	}
	for _, q := range queries {
		names := metricNames(q.expr)
		if len(names) == 0 {
			t.Errorf("%s names no toolledger or controller-runtime metric: %s", q.where, q.expr)
		}
		for _, name := range names {
			if why := checkMetricName(t, exp, name); why != "" {
				t.Errorf("%s queries %s, which is %s", q.where, name, why)
			}
		}
	}

	var missing []string
	for name, m := range exp {
		if slices.Contains(m.Labels, "namespace") && slices.Contains(m.Labels, "tool") && !shown[name] {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("no panel of %s shows %s", dashboardFile, quote(missing))
	}
}

// TestDashboardStructure: the dashboard chooses its Prometheus data source
// through a variable that every panel and query uses, and filters by the
// namespace and tool variables.
func TestDashboardStructure(t *testing.T) {
	d := readDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("the dashboard needs a uid and a title: %q, %q", d.UID, d.Title)
	}
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d: panels reference their data source by uid from schema 36 on", d.SchemaVersion)
	}
	vars := map[string]variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	if ds, ok := vars["datasource"]; !ok || ds.Type != "datasource" || ds.query() != "prometheus" {
		t.Errorf("the dashboard needs a variable datasource of type datasource for prometheus, has %+v", ds)
	}
	for _, name := range []string{"namespace", "tool"} {
		v, ok := vars[name]
		if !ok || v.Type != "query" || !strings.HasPrefix(v.query(), "label_values(") {
			t.Errorf("the dashboard needs a query variable %s from label_values, has %+v", name, v)
			continue
		}
		if v.Datasource == nil || v.Datasource.UID != "${datasource}" {
			t.Errorf("variable %s does not query the data source ${datasource}: %+v", name, v.Datasource)
		}
	}

	ids := map[int]string{}
	filtered := map[string]bool{}
	for _, p := range allPanels(d.Panels) {
		if prev, dup := ids[p.ID]; dup || p.ID == 0 {
			t.Errorf("panel %q has the id %d of %q", p.Title, p.ID, prev)
		}
		ids[p.ID] = p.Title
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q does not use the data source ${datasource}: %+v", p.Title, p.Datasource)
		}
		for _, target := range p.Targets {
			if target.Datasource != nil && target.Datasource.UID != "${datasource}" {
				t.Errorf("a query of panel %q uses the data source %+v", p.Title, target.Datasource)
			}
			for _, name := range []string{"namespace", "tool"} {
				if strings.Contains(target.Expr, "$"+name) {
					filtered[name] = true
				}
			}
		}
	}
	for _, name := range []string{"namespace", "tool"} {
		if !filtered[name] {
			t.Errorf("no panel filters by $%s", name)
		}
	}
}

// dashboardVariables stand in for Grafana's variables, so that promtool can
// parse the panels' queries.
var dashboardVariables = strings.NewReplacer(
	"$__rate_interval", "5m",
	"${namespace}", ".*", "$namespace", ".*",
	"${tool}", ".*", "$tool", ".*",
)

// TestDashboardQueriesParse: every panel's query is valid PromQL, checked
// by promtool as the expressions of recording rules.
func TestDashboardQueriesParse(t *testing.T) {
	d := readDashboard(t)
	var rules []map[string]string
	for _, p := range flatten(d.Panels) {
		for i, target := range p.Targets {
			expr := dashboardVariables.Replace(target.Expr)
			if strings.Contains(expr, "$") {
				t.Errorf("panel %q uses a variable the test does not know: %s", p.Title, target.Expr)
				continue
			}
			rules = append(rules, map[string]string{"record": fmt.Sprintf("dashboard:panel_%d_%d", p.ID, i), "expr": expr})
		}
	}
	out, err := json.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "dashboard-queries.yaml")
	if err := os.WriteFile(file, out, 0o600); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, "check", "rules", file)
}
