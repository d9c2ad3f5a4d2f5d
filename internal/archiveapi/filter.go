package archiveapi

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/selection"

	archivev1alpha1 "github.com/toolledger/toolledger/api/archive/v1alpha1"
	"github.com/toolledger/toolledger/internal/archive"
)

var selectableFields = []string{archivev1alpha1.FieldTool, archivev1alpha1.FieldPhase, archivev1alpha1.FieldExternalRef,
	archivev1alpha1.FieldRequestedBy, archivev1alpha1.FieldDecidedBy}

// parseFilter reads a list's fieldSelector and range parameters.
func parseFilter(query url.Values) (archive.Filter, error) {
	var f archive.Filter
	if v := query.Get("fieldSelector"); v != "" {
		selector, err := fields.ParseSelector(v)
		if err != nil {
			return f, fmt.Errorf("fieldSelector %q: %w", v, err)
		}
		for _, r := range selector.Requirements() {
			if r.Operator != selection.Equals && r.Operator != selection.DoubleEquals {
				return f, fmt.Errorf("fieldSelector %q: archived records select by equality only (=)", v)
			}
			target := map[string]*string{archivev1alpha1.FieldTool: &f.Tool, archivev1alpha1.FieldPhase: &f.Phase,
				archivev1alpha1.FieldExternalRef: &f.ExternalRef, archivev1alpha1.FieldRequestedBy: &f.RequestedBy,
				archivev1alpha1.FieldDecidedBy: &f.DecidedBy}[r.Field]
			if target == nil {
				return f, fmt.Errorf("fieldSelector %q: archived records cannot select by %q, only by %s", v, r.Field, strings.Join(selectableFields, ", "))
			}
			*target = r.Value
		}
	}
	for param, bound := range map[string]*time.Time{archivev1alpha1.ParamCompletedFrom: &f.CompletedFrom, archivev1alpha1.ParamCompletedUntil: &f.CompletedUntil} {
		if v := query.Get(param); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return f, fmt.Errorf("%s %q is not an RFC 3339 time, such as 2026-12-01T00:00:00Z", param, v)
			}
			*bound = t
		}
	}
	f.KeyPrefix = query.Get(archivev1alpha1.ParamKeyPrefix)
	return f, nil
}
