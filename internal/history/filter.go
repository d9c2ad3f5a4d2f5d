// Package history declares, once, what a search of the ledger's history
// selects: the Filter that the plugin's and the web console's searches
// take, the archive API's query that carries it, the SQL that answers it
// from the archive, its check of a ToolAction read from etcd or the
// archive, and the continue token of a list made under it. It imports no
// other package of the project but the API types, so that the archive,
// its API and the front ends' client all may.
package history

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/selection"

	archivev1alpha1 "github.com/toolledger/toolledger/api/archive/v1alpha1"
	"github.com/toolledger/toolledger/api/v1alpha1"
)

// Filter selects records of the ledger's history that match every field
// set; the zero Filter selects everything.
type Filter struct {
	// Tool is the tool's name; Phase the outcome; ExternalRef the
	// downstream's reference.
	Tool        string
	Phase       string
	ExternalRef string
	// RequestedBy is the user who created the action (its
	// toolledger.dev/requested-by annotation); DecidedBy the user who
	// approved or denied it.
	RequestedBy string
	DecidedBy   string
	// CompletedFrom (included) and CompletedUntil (not) bound the
	// completion time; zero leaves the side open. An action not finished
	// has none and is left out when either is set.
	CompletedFrom, CompletedUntil time.Time
	// KeyPrefix keeps the keys that start with it.
	KeyPrefix string
}

// equalities are the fields a fieldSelector of the archive API says, in
// the order its messages name them.
var equalities = []struct {
	field string
	of    func(*Filter) *string
}{
	{archivev1alpha1.FieldTool, func(f *Filter) *string { return &f.Tool }},
	{archivev1alpha1.FieldPhase, func(f *Filter) *string { return &f.Phase }},
	{archivev1alpha1.FieldExternalRef, func(f *Filter) *string { return &f.ExternalRef }},
	{archivev1alpha1.FieldRequestedBy, func(f *Filter) *string { return &f.RequestedBy }},
	{archivev1alpha1.FieldDecidedBy, func(f *Filter) *string { return &f.DecidedBy }},
}

// SelectableFields names the fields a list of archived records selects by.
func SelectableFields() string {
	names := make([]string, len(equalities))
	for i, e := range equalities {
		names[i] = e.field
	}
	return strings.Join(names, ", ")
}

// Query is the archive API's query for f: a fieldSelector of its
// equalities, and the range and prefix parameters. The API takes whole
// seconds: from is rounded down and until up, so that the answer holds
// every match; Matches checks it again, to the nanosecond.
func (f Filter) Query() url.Values {
	query := url.Values{}
	var terms []fields.Selector
	for _, e := range equalities {
		if v := *e.of(&f); v != "" {
			terms = append(terms, fields.OneTermEqualSelector(e.field, v))
		}
	}
	if len(terms) > 0 {
		query.Set("fieldSelector", fields.AndSelectors(terms...).String())
	}
	if !f.CompletedFrom.IsZero() {
		query.Set(archivev1alpha1.ParamCompletedFrom, f.CompletedFrom.UTC().Truncate(time.Second).Format(time.RFC3339))
	}
	if !f.CompletedUntil.IsZero() {
		query.Set(archivev1alpha1.ParamCompletedUntil, f.CompletedUntil.UTC().Add(time.Second-1).Truncate(time.Second).Format(time.RFC3339))
	}
	if f.KeyPrefix != "" {
		query.Set(archivev1alpha1.ParamKeyPrefix, f.KeyPrefix)
	}
	return query
}

// ParseQuery reads the filter of an archive API list's query: its
// fieldSelector, as Query or kubectl's --field-selector write it, and its
// range and prefix parameters.
func ParseQuery(query url.Values) (Filter, error) {
	var f Filter
	if v := query.Get("fieldSelector"); v != "" {
		selector, err := fields.ParseSelector(v)
		if err != nil {
			return f, fmt.Errorf("fieldSelector %q: %w", v, err)
		}
		for _, r := range selector.Requirements() {
			if r.Operator != selection.Equals && r.Operator != selection.DoubleEquals {
				return f, fmt.Errorf("fieldSelector %q: archived records select by equality only (=)", v)
			}
			target := f.equality(r.Field)
			if target == nil {
				return f, fmt.Errorf("fieldSelector %q: archived records cannot select by %q, only by %s", v, r.Field, SelectableFields())
			}
			*target = r.Value
		}
	}
	for _, bound := range []struct {
		param string
		into  *time.Time
	}{{archivev1alpha1.ParamCompletedFrom, &f.CompletedFrom}, {archivev1alpha1.ParamCompletedUntil, &f.CompletedUntil}} {
		if v := query.Get(bound.param); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return f, fmt.Errorf("%s %q is not an RFC 3339 time, such as 2026-12-01T00:00:00Z", bound.param, v)
			}
			*bound.into = t
		}
	}
	f.KeyPrefix = query.Get(archivev1alpha1.ParamKeyPrefix)
	return f, nil
}

// equality is f's field that the fieldSelector field says, nil for none.
func (f *Filter) equality(field string) *string {
	for _, e := range equalities {
		if e.field == field {
			return e.of(f)
		}
	}
	return nil
}

// ToolActionSelector is the part of f that the ToolActions' selectable
// fields say, so that the API server narrows a list of them; Matches
// checks the rest.
func (f Filter) ToolActionSelector() string {
	var terms []fields.Selector
	if f.Tool != "" {
		terms = append(terms, fields.OneTermEqualSelector("spec.toolRef.name", f.Tool))
	}
	if f.Phase != "" {
		terms = append(terms, fields.OneTermEqualSelector("status.phase", f.Phase))
	}
	return fields.AndSelectors(terms...).String()
}

// Matches reports whether f selects a, a ToolAction in etcd or as the
// archive kept it.
func (f Filter) Matches(a *v1alpha1.ToolAction) bool {
	var decidedBy string
	if a.Status.Approval != nil {
		decidedBy = a.Status.Approval.DecidedBy
	}
	equal := func(want, got string) bool { return want == "" || want == got }
	if !equal(f.Tool, a.Spec.ToolRef.Name) || !equal(f.Phase, string(a.Status.Phase)) || !equal(f.ExternalRef, a.Status.ExternalRef) ||
		!equal(f.RequestedBy, a.Annotations[v1alpha1.RequestedByAnnotation]) || !equal(f.DecidedBy, decidedBy) || !strings.HasPrefix(a.Name, f.KeyPrefix) {
		return false
	}
	if f.CompletedFrom.IsZero() && f.CompletedUntil.IsZero() {
		return true
	}
	if a.Status.CompletionTime == nil {
		return false
	}
	t := a.Status.CompletionTime.Time
	return (f.CompletedFrom.IsZero() || !t.Before(f.CompletedFrom)) && (f.CompletedUntil.IsZero() || t.Before(f.CompletedUntil))
}

// Where is f's condition on the archive's table of records
// (toolledger_records), one term to AND each, numbering its arguments
// from len(args)+1; and args with their values appended.
func (f Filter) Where(args []any) ([]string, []any) {
	var conds []string
	add := func(cond string, value any) {
		args = append(args, value)
		conds = append(conds, strings.ReplaceAll(cond, "?", fmt.Sprintf("$%d", len(args))))
	}
	if f.Tool != "" {
		add("tool_name = ?", f.Tool)
	}
	if f.Phase != "" {
		add("phase = ?", f.Phase)
	}
	if f.ExternalRef != "" {
		add("external_ref = ?", f.ExternalRef)
	}
	if f.RequestedBy != "" {
		add("action->'metadata'->'annotations'->>'"+v1alpha1.RequestedByAnnotation+"' = ?", f.RequestedBy)
	}
	if f.DecidedBy != "" {
		add("action->'status'->'approval'->>'decidedBy' = ?", f.DecidedBy)
	}
	if !f.CompletedFrom.IsZero() {
		add("completion_time >= ?", f.CompletedFrom)
	}
	if !f.CompletedUntil.IsZero() {
		add("completion_time < ?", f.CompletedUntil)
	}
	if f.KeyPrefix != "" {
		// starts_with, not LIKE: no escaping, and the same under any
		// collation; the namespace's index narrows what it scans.
		add("starts_with(key, ?)", f.KeyPrefix)
	}
	return conds, args
}
