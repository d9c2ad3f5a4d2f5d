package archiveapi

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"

	archivev1alpha1 "github.com/toolledger/toolledger/api/archive/v1alpha1"
	ledgerv1alpha1 "github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/archive"
)

// Object is the API's view of an archived record: the ToolAction it keeps
// (without what only etcd's copy needs: resourceVersion, generation,
// finalizers, managedFields), or, for a record migrated from a Tombstone,
// what the Tombstone kept.
func Object(r *archive.Record) (*archivev1alpha1.ArchivedToolAction, error) {
	out := &archivev1alpha1.ArchivedToolAction{
		TypeMeta: metav1.TypeMeta{APIVersion: archivev1alpha1.GroupVersion.String(), Kind: "ArchivedToolAction"},
		Archive: archivev1alpha1.ArchiveInfo{
			Cause: r.Cause, DeletedBy: r.DeletedBy, DeletionTime: metav1.NewTime(r.DeletionTime),
			GuardsKey: r.GuardsKey, IdempotencyClass: r.IdempotencyClass, NamespaceUID: string(r.NamespaceUID), ArchivedAt: metav1.NewTime(r.ArchivedAt), Omitted: r.Omitted,
		},
	}
	if r.Chain.Sequence > 0 {
		out.Archive.Chain = &archivev1alpha1.ChainLink{Sequence: r.Chain.Sequence, Hash: r.Chain.Hash}
	}
	var head metav1.TypeMeta
	if err := json.Unmarshal(r.Action, &head); err != nil {
		return nil, fmt.Errorf("the archived record %s/%s (uid %s) cannot be read: %w", r.Namespace, r.Key, r.UID, err)
	}
	if head.Kind == "Tombstone" {
		out.ObjectMeta = metav1.ObjectMeta{Name: r.Key, Namespace: r.Namespace, UID: r.UID}
		out.Spec.ToolRef = r.Tool
		out.Status = statusOf(r)
		out.Archive.FromTombstone = true
		return out, nil
	}
	var action ledgerv1alpha1.ToolAction
	if err := json.Unmarshal(r.Action, &action); err != nil {
		return nil, fmt.Errorf("the archived record %s/%s (uid %s) cannot be read: %w", r.Namespace, r.Key, r.UID, err)
	}
	m := action.ObjectMeta
	out.ObjectMeta = metav1.ObjectMeta{
		Name: m.Name, Namespace: m.Namespace, UID: m.UID, Labels: m.Labels, Annotations: m.Annotations,
		CreationTimestamp: m.CreationTimestamp, OwnerReferences: m.OwnerReferences,
	}
	out.Spec, out.Status = action.Spec, action.Status
	return out, nil
}

// statusOf is the status a Tombstone's record keeps.
func statusOf(r *archive.Record) ledgerv1alpha1.ToolActionStatus {
	completed := metav1.NewTime(r.CompletionTime)
	status := ledgerv1alpha1.ToolActionStatus{
		Phase: r.Phase, RequestDigest: r.RequestDigest, ExternalRef: r.ExternalRef, Attempts: r.Attempts,
		CompletionTime: &completed,
	}
	if r.ErrorClass != "" || r.ErrorReason != "" {
		status.Error = &ledgerv1alpha1.ActionError{Class: r.ErrorClass, Reason: r.ErrorReason}
	}
	return status
}

// wantsTable is whether the client asked for a Table (kubectl get does).
func wantsTable(r *http.Request) bool {
	for _, accepted := range strings.Split(r.Header.Get("Accept"), ",") {
		_, params, err := mime.ParseMediaType(strings.TrimSpace(accepted))
		if err == nil && params["as"] == "Table" && params["g"] == metav1.GroupName && (params["v"] == "v1" || params["v"] == "v1beta1") {
			return true
		}
	}
	return false
}

var columns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "The idempotency key."},
	{Name: "Tool", Type: "string", Description: "The tool the action called."},
	{Name: "Phase", Type: "string", Description: "The action's outcome."},
	{Name: "External-Ref", Type: "string", Description: "The downstream's reference of the effect."},
	{Name: "Attempts", Type: "integer", Description: "Attempts sent downstream."},
	{Name: "Cause", Type: "string", Description: "Why the record left etcd."},
	{Name: "Guards-Key", Type: "boolean", Description: "Whether the record still keeps its key."},
	{Name: "Completed", Type: "string", Description: "How long ago the action finished."},
}

// table is the records as kubectl prints them.
func table(items []archivev1alpha1.ArchivedToolAction, includeObject string) *metav1.Table {
	t := &metav1.Table{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "Table"}, ColumnDefinitions: columns}
	for i := range items {
		t.Rows = append(t.Rows, tableRow(&items[i], includeObject))
	}
	return t
}

// tableRow is a record as kubectl prints it.
func tableRow(a *archivev1alpha1.ArchivedToolAction, includeObject string) metav1.TableRow {
	completed := "<unknown>"
	if a.Status.CompletionTime != nil {
		completed = duration.HumanDuration(time.Since(a.Status.CompletionTime.Time))
	}
	return metav1.TableRow{Cells: []any{
		a.Name, a.Spec.ToolRef.Name, string(a.Status.Phase), a.Status.ExternalRef, int64(a.Status.Attempts),
		a.Archive.Cause, a.Archive.GuardsKey, completed,
	}, Object: rowObject(includeObject, a, a.ObjectMeta)}
}

// rowObject is what a Table's row carries of its object, as the client's
// includeObject asks: nothing, the object, or by default its metadata.
func rowObject(includeObject string, obj runtime.Object, meta metav1.ObjectMeta) runtime.RawExtension {
	switch includeObject {
	case "None":
		return runtime.RawExtension{}
	case "Object":
		return runtime.RawExtension{Object: obj}
	}
	return runtime.RawExtension{Object: &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"},
		ObjectMeta: meta,
	}}
}
