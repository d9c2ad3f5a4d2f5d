package observability

import (
	"bufio"
	"bytes"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"sigs.k8s.io/yaml"
)

const (
	alertsFile      = "config/prometheus/alerts.yaml"
	alertsTestFile  = "config/prometheus/alerts_test.yaml"
	operationsDoc   = "docs/operations.md"
	runbookURLStart = "https://github.com/toolledger/toolledger/blob/main/" + operationsDoc + "#"
)

// ruleFile is the part of a Prometheus rule file the tests read.
type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []rule `json:"rules"`
	} `json:"groups"`
}

type rule struct {
	Alert       string            `json:"alert"`
	Record      string            `json:"record"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

func readRules(t *testing.T) []rule {
	t.Helper()
	var f ruleFile
	if err := yaml.Unmarshal(readFile(t, alertsFile), &f); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	var rules []rule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatalf("%s has no rules", alertsFile)
	}
	return rules
}

// TestAlertRulesCheck: promtool accepts the rule file.
func TestAlertRulesCheck(t *testing.T) {
	out := runPromtool(t, "check", "rules", alertsFile)
	if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool check rules did not report success:\n%s", out)
	}
}

// TestAlertRulesUnit: the promtool unit tests of the rules pass.
func TestAlertRulesUnit(t *testing.T) {
	out := runPromtool(t, "test", "rules", alertsTestFile)
	if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool test rules did not report success:\n%s", out)
	}
}

// TestEveryAlertIsUnitTested: each alert is expected to fire somewhere in
// the unit tests, and expected silent somewhere (exp_alerts: []).
func TestEveryAlertIsUnitTested(t *testing.T) {
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(readFile(t, alertsTestFile), &tests); err != nil {
		t.Fatalf("%s: %v", alertsTestFile, err)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, test := range tests.Tests {
		for _, c := range test.AlertRuleTest {
			if len(c.ExpAlerts) > 0 {
				fires[c.Alertname] = true
			} else {
				silent[c.Alertname] = true
			}
		}
	}
	for _, r := range readRules(t) {
		if r.Alert == "" {
			continue
		}
		if !fires[r.Alert] {
			t.Errorf("%s: no unit test in %s expects it to fire", r.Alert, alertsTestFile)
		}
		if !silent[r.Alert] {
			t.Errorf("%s: no unit test in %s expects it silent (exp_alerts: [])", r.Alert, alertsTestFile)
		}
	}
}

// TestAlertsHaveRunbooks: every alert has a severity, a summary, a
// description and a runbook_url pointing to a section of docs/operations.md
// that exists.
func TestAlertsHaveRunbooks(t *testing.T) {
	anchors := headingAnchors(t, readFile(t, operationsDoc))
	for _, r := range readRules(t) {
		if r.Alert == "" {
			continue
		}
		switch r.Labels["severity"] {
		case "critical", "warning", "info":
		default:
			t.Errorf("%s: labels.severity is %q, not critical, warning or info", r.Alert, r.Labels["severity"])
		}
		for _, a := range []string{"summary", "description", "runbook_url"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("%s: no annotations.%s", r.Alert, a)
			}
		}
		// An alert by tool says which: its description names the namespace
		// and the tool.
		if strings.Contains(r.Expr, "by (namespace, tool_kind, tool") {
			for _, l := range []string{"$labels.namespace", "$labels.tool"} {
				if !strings.Contains(r.Annotations["description"], l) {
					t.Errorf("%s: the description does not name %s", r.Alert, l)
				}
			}
		}
		link := r.Annotations["runbook_url"]
		anchor, ok := strings.CutPrefix(link, runbookURLStart)
		if !ok {
			t.Errorf("%s: runbook_url %q does not start with %s", r.Alert, link, runbookURLStart)
			continue
		}
		if u, err := url.Parse(link); err != nil || u.Fragment != anchor {
			t.Errorf("%s: runbook_url %q is not a URL with the fragment %q", r.Alert, link, anchor)
		}
		if !anchors[anchor] {
			t.Errorf("%s: runbook_url's anchor #%s is no heading of %s", r.Alert, anchor, operationsDoc)
		}
	}
}

// TestAlertExpressionsNameExportedMetrics: every metric the rules query is
// exported by the manager or the SDK, or registered by controller-runtime.
func TestAlertExpressionsNameExportedMetrics(t *testing.T) {
	exp := exported(t)
	for _, r := range readRules(t) {
		names := metricNames(r.Expr)
		if len(names) == 0 {
			t.Errorf("%s: the expression names no toolledger or controller-runtime metric: %s", r.Alert+r.Record, r.Expr)
		}
		for _, name := range names {
			if why := checkMetricName(t, exp, name); why != "" {
				t.Errorf("%s queries %s, which is %s", r.Alert+r.Record, name, why)
			}
		}
	}
}

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown document (outside fenced code blocks): the text lowercased,
// with every character but letters, digits, spaces, '-' and '_' dropped
// and spaces turned into '-'; a repeated anchor gets -1, -2, ...
func headingAnchors(t *testing.T, doc []byte) map[string]bool {
	t.Helper()
	anchors := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	s := bufio.NewScanner(bytes.NewReader(doc))
	for s.Scan() {
		line := s.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		m := headingPattern.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		anchor := githubAnchor(m[1])
		if n := seen[anchor]; n > 0 {
			seen[anchor]++
			anchor += "-" + strconv.Itoa(n)
		} else {
			seen[anchor] = 1
		}
		anchors[anchor] = true
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return anchors
}

var headingPattern = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)

func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestGithubAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"ToolledgerActionEscalated":          "toolledgeractionescalated",
		"Working the reconciliation queue":   "working-the-reconciliation-queue",
		"Where duplicates are counted":       "where-duplicates-are-counted",
		"`kubectl toolledger` (the console)": "kubectl-toolledger-the-console",
		"Limits and fair-dispatch, step_2":   "limits-and-fair-dispatch-step_2",
	} {
		if got := githubAnchor(heading); got != want {
			t.Errorf("githubAnchor(%q) = %q, want %q", heading, got, want)
		}
	}
}
