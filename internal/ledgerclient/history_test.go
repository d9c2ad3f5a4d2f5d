package ledgerclient

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	archivev1alpha1 "github.com/toolledger/toolledger/api/archive/v1alpha1"
	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/history"
)

func historyAction(key, uid string, completed *metav1.Time) v1alpha1.ToolAction {
	return v1alpha1.ToolAction{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: key, UID: types.UID(uid), CreationTimestamp: at(0),
			Annotations: map[string]string{v1alpha1.RequestedByAnnotation: "alice"}},
		Spec:   v1alpha1.ToolActionSpec{ToolRef: v1alpha1.ToolReference{Name: "charge"}},
		Status: v1alpha1.ToolActionStatus{Phase: v1alpha1.PhaseSucceeded, CompletionTime: completed},
	}
}

// historyServer answers the ToolActions of etcd and, with archive, the
// archived records in two pages, recording the archive's queries.
func historyServer(t *testing.T, archive bool, queries *[]string) *Ledger {
	t.Helper()
	etcd := v1alpha1.ToolActionList{Items: []v1alpha1.ToolAction{
		historyAction("e1", "e1", timePtr(3*time.Minute)),
		historyAction("e2", "e2", nil),
		historyAction("dup", "D", timePtr(time.Minute)),
	}}
	archived := func(a v1alpha1.ToolAction) archivev1alpha1.ArchivedToolAction {
		return archivev1alpha1.ArchivedToolAction{ObjectMeta: a.ObjectMeta, Spec: a.Spec, Status: a.Status}
	}
	pages := []archivev1alpha1.ArchivedToolActionList{
		{Items: []archivev1alpha1.ArchivedToolAction{archived(historyAction("a1", "a1", timePtr(0))), archived(historyAction("dup", "D", timePtr(time.Minute)))}},
		{Items: []archivev1alpha1.ArchivedToolAction{archived(historyAction("a2", "a2", timePtr(2*time.Minute)))}},
	}
	pages[0].Continue = "page-2"
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/apis/toolledger.dev/v1alpha1/namespaces/shop/toolactions":
			_ = json.NewEncoder(w).Encode(etcd)
		case "/apis/archive.toolledger.dev/v1alpha1/namespaces/shop/archivedtoolactions":
			if !archive {
				w.Header().Set("Content-Type", "text/plain")
				http.NotFound(w, r)
				return
			}
			*queries = append(*queries, r.URL.RawQuery)
			page := pages[0]
			if r.URL.Query().Get("continue") == "page-2" {
				page = pages[1]
			}
			_ = json.NewEncoder(w).Encode(page)
		default:
			t.Errorf("unexpected request %s", r.URL)
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(server.Close)
	ledger, err := NewLedger(&rest.Config{Host: server.URL}, "history-test")
	if err != nil {
		t.Fatal(err)
	}
	return ledger
}

func TestHistoryMergesEtcdAndTheArchiveInOrder(t *testing.T) {
	var queries []string
	ledger := historyServer(t, true, &queries)
	keys := func(records []HistoryRecord) []string {
		var out []string
		for _, r := range records {
			out = append(out, r.Key+"@"+r.Source)
		}
		return out
	}
	records, matched, archived, err := ledger.History(t.Context(), "shop", history.Filter{RequestedBy: "alice"}, 0)
	if err != nil || !archived || matched != 5 {
		t.Fatalf("History: %d matched, archived %v, %v", matched, archived, err)
	}
	// By completion, the unfinished last; the record in both places once, from etcd.
	if want := []string{"a1@archive", "dup@etcd", "a2@archive", "e1@etcd", "e2@etcd"}; !slices.Equal(keys(records), want) {
		t.Errorf("records %v, want %v", keys(records), want)
	}
	if len(queries) != 2 || queries[0] != "fieldSelector=metadata.annotations.toolledger.dev%2Frequested-by%3Dalice&limit=250" {
		t.Errorf("archive queries %q, want the requester's field selector, in two pages", queries)
	}
	records, matched, _, err = ledger.History(t.Context(), "shop", history.Filter{}, 2)
	if err != nil || matched != 5 || !slices.Equal(keys(records), []string{"e1@etcd", "e2@etcd"}) {
		t.Errorf("the newest 2: %v of %d, %v", keys(records), matched, err)
	}
	records, matched, _, err = ledger.History(t.Context(), "shop", history.Filter{CompletedFrom: now.Add(time.Minute), CompletedUntil: now.Add(3 * time.Minute)}, 0)
	if err != nil || matched != 2 || !slices.Equal(keys(records), []string{"dup@etcd", "a2@archive"}) {
		t.Errorf("completed in [1m, 3m): %v of %d, %v", keys(records), matched, err)
	}
}

func TestHistoryWithoutAnArchiveSearchesEtcd(t *testing.T) {
	ledger := historyServer(t, false, nil)
	records, matched, archived, err := ledger.History(t.Context(), "shop", history.Filter{}, 0)
	if err != nil || archived || matched != 3 || len(records) != 3 {
		t.Fatalf("History without an archive API: %d records of %d, archived %v, %v", len(records), matched, archived, err)
	}
}
