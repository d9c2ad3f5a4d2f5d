package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// TestLoadedRecord checks that each record loaded into the archive is a
// finished action of its own key, as large as the template's.
func TestLoadedRecord(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	template, err := archivedRecord(0, now)
	if err != nil {
		t.Fatal(err)
	}
	r := loadedRecord(template, string(template.Action), 1234, now)
	if r.UID != "archived-00001234" || r.Namespace != "archived-034" || r.Key != "key-00001234" {
		t.Fatalf("row %s %s/%s, want archived-00001234 archived-034/key-00001234", r.UID, r.Namespace, r.Key)
	}
	var a v1alpha1.ToolAction
	if err := json.Unmarshal(r.Action, &a); err != nil {
		t.Fatal(err)
	}
	if a.UID != r.UID || a.Namespace != r.Namespace || a.Name != r.Key {
		t.Errorf("document of %s %s/%s names %s %s/%s", r.UID, r.Namespace, r.Key, a.UID, a.Namespace, a.Name)
	}
	if a.Status.Phase != v1alpha1.PhaseSucceeded || !r.GuardsKey || r.CompletionTime.After(now.Add(-24*time.Hour)) {
		t.Errorf("record %s/%s: phase %s, guards its key %t, completed %s; want Succeeded, true, a day or more before %s",
			r.Namespace, r.Key, a.Status.Phase, r.GuardsKey, r.CompletionTime, now)
	}
	if len(r.Action) != len(template.Action) {
		t.Errorf("document of %d bytes, the template's %d", len(r.Action), len(template.Action))
	}
}
