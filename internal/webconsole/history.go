package webconsole

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	archivev1alpha1 "github.com/toolledger/toolledger/api/archive/v1alpha1"
	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/history"
	"github.com/toolledger/toolledger/internal/ledgerclient"
)

type historyPage struct {
	Namespace string
	// The filters as given, to fill the form again.
	Tool, Outcome, Requester, Approver, ExternalRef, From, Until, KeyPrefix string
	Phases                                                                  []v1alpha1.Phase
	Records                                                                 []historyRow
	// Archived is whether the archive was searched; Shown of Matched
	// records are listed, the newest.
	Archived       bool
	Shown, Matched int
	Error          string
	Verify         bool
	Chains         []archivev1alpha1.ArchiveChain
	VerifyError    string
}

type historyRow struct {
	ledgerclient.HistoryRecord
	Completed string
}

// verifyRounds bounds the archive API's verifications one History page
// asks for (20 seconds each at most): a longer chain shows how far it got,
// and the next Verify goes on from there.
const verifyRounds = 2

// historyLimit is the most records the page lists: the newest. A search
// holds about twice as many, and one page of the API's answers.
const historyLimit = 500

// maxSearches bounds the history searches the console runs at once, each
// holding what historyLimit says; a search that cannot start within
// searchWait is answered 429.
const (
	maxSearches = 4
	searchWait  = 5 * time.Second
)

// historyPage searches the history in etcd and the archive as the user,
// and, asked, verifies the archive's chain of the namespace.
func (s *Server) historyPage(w http.ResponseWriter, r *http.Request, u *user) {
	q := r.URL.Query()
	field := func(name string) string { return strings.TrimSpace(q.Get(name)) }
	page := historyPage{Namespace: s.namespaceOf(r), Tool: field("tool"), Outcome: field("outcome"), Requester: field("requester"),
		Approver: field("approver"), ExternalRef: field("externalRef"), From: field("from"), Until: field("until"),
		KeyPrefix: field("keyPrefix"), Phases: historyPhases, Verify: q.Get("verify") != ""}
	filter := history.Filter{Tool: page.Tool, Phase: page.Outcome, RequestedBy: page.Requester, DecidedBy: page.Approver,
		ExternalRef: page.ExternalRef, KeyPrefix: page.KeyPrefix}
	var problems []string
	if problem := validNamespace(page.Namespace); problem != "" {
		problems = append(problems, problem)
	}
	for _, bound := range []struct {
		name, value string
		into        *time.Time
	}{{"from", page.From, &filter.CompletedFrom}, {"until", page.Until, &filter.CompletedUntil}} {
		if bound.value == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339, bound.value)
		if err != nil {
			problems = append(problems, bound.name+" "+bound.value+" is not an RFC 3339 time, such as 2026-12-01T00:00:00Z")
		}
		*bound.into = t
	}
	status := http.StatusOK
	if len(problems) > 0 {
		page.Error = strings.Join(problems, "; ")
		s.render(w, http.StatusBadRequest, "history", s.pageData(r, u, "History", page))
		return
	}
	waiting, cancel := context.WithTimeout(r.Context(), searchWait)
	defer cancel()
	if err := s.searches.Acquire(waiting, 1); err != nil {
		w.Header().Set("Retry-After", "5")
		page.Error = "Too many searches of the history are running; retry in a few seconds."
		s.render(w, http.StatusTooManyRequests, "history", s.pageData(r, u, "History", page))
		return
	}
	defer s.searches.Release(1)
	records, matched, archived, err := u.ledger.History(r.Context(), listScope(page.Namespace), filter, historyLimit)
	if err != nil {
		status, page.Error = apiStatus(err), err.Error()
	}
	page.Archived, page.Matched = archived, matched
	now := s.opts.Now()
	for _, record := range records {
		row := historyRow{HistoryRecord: record}
		if record.CompletionTime != nil {
			row.Completed = humanAge(now, *record.CompletionTime)
		}
		page.Records = append(page.Records, row)
	}
	page.Shown = len(page.Records)
	// Verified whatever the search found: a search too broad says nothing
	// of the chain.
	if page.Verify {
		var verr error
		if page.Chains, verr = u.ledger.VerifyChains(r.Context(), listScope(page.Namespace), ledgerclient.VerifyOptions{Rounds: verifyRounds}); verr != nil {
			page.VerifyError = verr.Error()
		}
	}
	s.render(w, status, "history", s.pageData(r, u, "History", page))
}

var historyPhases = []v1alpha1.Phase{v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed, v1alpha1.PhaseEscalated, v1alpha1.PhaseUnknown,
	v1alpha1.PhaseAwaitingApproval, v1alpha1.PhaseExecuting, v1alpha1.PhaseRetryScheduled, v1alpha1.PhaseAccepted}

// chainHead spells a chain's head as the plugin does: SEQUENCE:HASH.
func chainHead(head archivev1alpha1.ChainLink) string {
	if head.Sequence == 0 {
		return "empty"
	}
	return fmt.Sprintf("%d:%s", head.Sequence, head.Hash)
}
