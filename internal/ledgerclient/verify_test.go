package ledgerclient

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/client-go/rest"

	archivev1alpha1 "github.com/toolledger/toolledger/api/archive/v1alpha1"
)

// verifyServer answers a get of shop's ArchiveChain with steps, one per
// request, the last again once they run out, and records the queries.
func verifyServer(t *testing.T, steps []archivev1alpha1.ArchiveChainStatus, queries *[]string) *Ledger {
	t.Helper()
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/apis/archive.toolledger.dev/v1alpha1/namespaces/shop/archivechains/ledger" {
			t.Errorf("unexpected request %s", r.URL)
			http.NotFound(w, r)
			return
		}
		*queries = append(*queries, r.URL.RawQuery)
		step := steps[min(len(*queries), len(steps))-1]
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(archivev1alpha1.ArchiveChain{Status: step})
	}))
	t.Cleanup(server.Close)
	ledger, err := NewLedger(&rest.Config{Host: server.URL}, "verify-test")
	if err != nil {
		t.Fatal(err)
	}
	return ledger
}

// A chain the manager verifies over several requests is asked for again
// while a round got on with it, telling the progress; a full verification
// is asked for each round.
func TestVerifyChainsAsksAgainWhileAChainIsIncomplete(t *testing.T) {
	var queries []string
	ledger := verifyServer(t, []archivev1alpha1.ArchiveChainStatus{
		{Head: archivev1alpha1.ChainLink{Sequence: 500}, Length: 1200, Checked: 500},
		{Head: archivev1alpha1.ChainLink{Sequence: 1000}, Length: 1200, Checked: 500},
		{Head: archivev1alpha1.ChainLink{Sequence: 1200}, Length: 1200, Checked: 200, Complete: true, Verified: true},
	}, &queries)
	var told []int64
	chains, err := ledger.VerifyChains(context.Background(), "shop", VerifyOptions{Full: true, CopiedHead: "7:ab",
		Progress: func(c []archivev1alpha1.ArchiveChain) { told = append(told, c[0].Status.Head.Sequence) }})
	if err != nil || len(chains) != 1 || !chains[0].Status.Verified {
		t.Fatalf("VerifyChains = %+v, %v", chains, err)
	}
	if len(queries) != 3 || queries[0] != "full=true&head=7%3Aab" || len(told) != 2 || told[0] != 500 || told[1] != 1000 {
		t.Errorf("queries %q, progress told %v; want 3 rounds with full and the head, progress at 500 and 1000", queries, told)
	}

	// Rounds bound the requests; a round that got nowhere (a manager of an
	// older version) is the last.
	queries = nil
	chains, err = ledger.VerifyChains(context.Background(), "shop", VerifyOptions{Rounds: 2})
	if err != nil || len(queries) != 2 || chains[0].Status.Complete {
		t.Errorf("two rounds: %d queries, %+v, %v", len(queries), chains, err)
	}
	queries = nil
	stuck := verifyServer(t, []archivev1alpha1.ArchiveChainStatus{{Verified: true}}, &queries)
	if _, err := stuck.VerifyChains(context.Background(), "shop", VerifyOptions{}); err != nil || len(queries) != 1 {
		t.Errorf("a manager that tells no progress was asked %d times, %v; want once", len(queries), err)
	}
}
