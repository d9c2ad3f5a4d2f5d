package ledgerclient

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	archivev1alpha1 "github.com/toolledger/toolledger/api/archive/v1alpha1"
	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/history"
	"github.com/toolledger/toolledger/internal/pager"
)

// Where a history record was read.
const (
	SourceEtcd    = "etcd"
	SourceArchive = "archive"
)

// HistoryRecord is one record of the history, wherever it is kept.
type HistoryRecord struct {
	Namespace      string       `json:"namespace"`
	Key            string       `json:"key"`
	UID            types.UID    `json:"uid"`
	Tool           string       `json:"tool"`
	Phase          string       `json:"phase"`
	ExternalRef    string       `json:"externalRef,omitempty"`
	RequestedBy    string       `json:"requestedBy,omitempty"`
	DecidedBy      string       `json:"decidedBy,omitempty"`
	Attempts       int32        `json:"attempts"`
	Created        metav1.Time  `json:"creationTimestamp"`
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// Source is etcd (a ToolAction) or archive (an ArchivedToolAction).
	Source string `json:"source"`
}

// MaxHistory bounds the records a search that keeps every match gathers:
// one that matches more asks for narrower filters, or for the newest only.
const MaxHistory = 10000

// ErrTooMuchHistory is the error of a search that keeps every match and
// matches more than MaxHistory records.
var ErrTooMuchHistory = fmt.Errorf("the search matches more than %d records: narrow it (a tool, a requester, a time range, a key prefix), or ask for the newest only", MaxHistory)

// History searches the ledger's history in namespace ("" for every
// namespace): the ToolActions in etcd and, when the cluster serves the
// archive API, the records that left etcd for the archive, as the
// Ledger's user, who sees only what RBAC lets them read. It returns the
// newest newest records that match (0 for every one, up to MaxHistory) in
// order of completion, the unfinished last by creation; a record read in
// both places (archived, not yet deleted from etcd) once. matched counts
// every match; archived reports whether the archive was searched.
func (l *Ledger) History(ctx context.Context, namespace string, filter history.Filter, newest int) (records []HistoryRecord, matched int, archived bool, err error) {
	// Only the records in etcd can also be in the archive.
	inEtcd := map[types.UID]bool{}
	add := func(a *v1alpha1.ToolAction, source string) error {
		if inEtcd[a.UID] || !filter.Matches(a) {
			return nil
		}
		r := recordOf(a, source)
		if source == SourceEtcd {
			inEtcd[r.UID] = true
		}
		matched++
		records = append(records, r)
		switch {
		case newest == 0 && len(records) > MaxHistory:
			return ErrTooMuchHistory
		case newest > 0 && len(records) >= 2*newest+listPageSize:
			records = newestOf(records, newest)
		}
		return nil
	}
	// The selectable fields narrow the list on the API server.
	opts := metav1.ListOptions{FieldSelector: filter.ToolActionSelector()}
	err = listPages(ctx, l, resourceActions, namespace, opts, func(page *v1alpha1.ToolActionList) error {
		for i := range page.Items {
			if err := add(&page.Items[i], SourceEtcd); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, 0, false, fmt.Errorf("cannot search the ToolActions in %s: %w", Scope(namespace), err)
	}
	req := l.archive.Get().Resource(archivev1alpha1.Resource).Param("limit", fmt.Sprint(listPageSize))
	if namespace != "" {
		req = req.Namespace(namespace)
	}
	// The archive answers to the second; Matches checks its answer again.
	for param, values := range filter.Query() {
		req = req.Param(param, values[0])
	}
	err = pager.Walk(func(cont string) (string, error) {
		var page archivev1alpha1.ArchivedToolActionList
		r := req
		if cont != "" {
			r = r.Param("continue", cont)
		}
		err := r.Do(ctx).Into(&page)
		if isNoArchiveAPI(err) {
			return "", nil
		}
		if err != nil {
			return "", fmt.Errorf("cannot search the archive in %s: %w", Scope(namespace), err)
		}
		archived = true
		for i := range page.Items {
			if err := add(ActionOf(&page.Items[i]), SourceArchive); err != nil {
				return "", err
			}
		}
		return page.Continue, nil
	})
	if err != nil {
		return nil, 0, false, err
	}
	if newest > 0 {
		return newestOf(records, newest), matched, archived, nil
	}
	slices.SortStableFunc(records, compareHistory)
	return records, matched, archived, nil
}

// newestOf sorts records and keeps the newest n.
func newestOf(records []HistoryRecord, n int) []HistoryRecord {
	slices.SortStableFunc(records, compareHistory)
	if len(records) > n {
		records = slices.Clone(records[len(records)-n:])
	}
	return records
}

// compareHistory orders records by completion, the unfinished last by
// creation, then by namespace and key.
func compareHistory(a, b HistoryRecord) int {
	switch {
	case a.CompletionTime != nil && b.CompletionTime == nil:
		return -1
	case a.CompletionTime == nil && b.CompletionTime != nil:
		return 1
	case a.CompletionTime != nil && !a.CompletionTime.Equal(b.CompletionTime):
		return a.CompletionTime.Compare(b.CompletionTime.Time)
	case a.CompletionTime == nil && !a.Created.Equal(&b.Created):
		return a.Created.Compare(b.Created.Time)
	}
	return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Key, b.Key), strings.Compare(string(a.UID), string(b.UID)))
}

// recordOf is the history record of a, read from source.
func recordOf(a *v1alpha1.ToolAction, source string) HistoryRecord {
	r := HistoryRecord{Namespace: a.Namespace, Key: a.Name, UID: a.UID, Tool: a.Spec.ToolRef.Name, Phase: string(a.Status.Phase),
		ExternalRef: a.Status.ExternalRef, RequestedBy: a.Annotations[v1alpha1.RequestedByAnnotation], Attempts: a.Status.Attempts,
		Created: a.CreationTimestamp, CompletionTime: a.Status.CompletionTime, Source: source}
	if a.Status.Approval != nil {
		r.DecidedBy = a.Status.Approval.DecidedBy
	}
	return r
}
