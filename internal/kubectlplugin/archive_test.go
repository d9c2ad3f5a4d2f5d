package kubectlplugin

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	archivev1alpha1 "github.com/toolledger/toolledger/api/archive/v1alpha1"
	"github.com/toolledger/toolledger/api/v1alpha1"
)

// objectsAPI answers a GET of a path with its object, whatever the query,
// and any other request with a NotFound Status, as the API server does.
type objectsAPI struct {
	t       *testing.T
	objects map[string]any
}

func (f objectsAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	object, found := f.objects[r.URL.Path]
	if r.Method != http.MethodGet || !found {
		w.WriteHeader(http.StatusNotFound)
		object = metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
			Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound, Message: r.URL.Path + " not found"}
	}
	if err := json.NewEncoder(w).Encode(object); err != nil {
		f.t.Errorf("cannot encode the answer to %s: %v", r.URL.Path, err)
	}
}

const (
	ledgerAPI  = "/apis/toolledger.dev/v1alpha1/"
	archiveAPI = "/apis/archive.toolledger.dev/v1alpha1/"
)

// tamperedArchive serves what a database-side tamperer wrote into the
// archive: a record and a chain whose every text holds escape sequences,
// and a tombstone deleted by a user so named.
func tamperedArchive(t *testing.T) objectsAPI {
	record := archivev1alpha1.ArchivedToolAction{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop\x1b[2J", Name: "order-1\x1b[2J\x1b[H", UID: "4b1d\x1b]0;owned\x07",
			Annotations: map[string]string{v1alpha1.RequestedByAnnotation: "alice\x1b[8m"}},
		Spec: v1alpha1.ToolActionSpec{ToolRef: v1alpha1.ToolReference{Name: "charge\x1b[5m"},
			Provenance: &v1alpha1.Provenance{Principals: []string{"agent\u202etxt"}}},
		Status: v1alpha1.ToolActionStatus{
			Phase:          "Succeeded\x1b[1A",
			Attempts:       1,
			IdempotencyKey: "shop/order-1\x1b[K",
			RequestDigest:  "sha256:\x1b[31mabc",
			Approval:       &v1alpha1.ApprovalRecord{Name: "order-1-approval", Decision: v1alpha1.Approved, DecidedBy: "bob\x07"},
			Claim:          &v1alpha1.ExecutorClaim{Executor: "executor\x1b[0m", Attempt: 1},
			Conditions:     []metav1.Condition{{Type: "Succeeded\x1b[2K", Status: "True\x1b[3J", Reason: "Succeeded"}},
			History:        []v1alpha1.Transition{{From: "Executing\x1b[6n", To: "Succeeded\x1b[?25l", Reason: "Succeeded", Attempt: 1}},
			CompensatedBy:  []string{"refund\x1b[7m"},
		},
		Archive: archivev1alpha1.ArchiveInfo{Cause: "Deleted", DeletedBy: "carol\x1b]0;owned\x07"},
	}
	tomb := tombstone("shop", "order-2", v1alpha1.ToolReference{Name: "charge\x1b[5m"})
	tomb.Record.DeletedBy = "dave\x1b[2J"
	tomb.Record.Cause = "Deleted\x1b[1A"
	return objectsAPI{t: t, objects: map[string]any{
		archiveAPI + "archivechains": archivev1alpha1.ArchiveChainList{Items: []archivev1alpha1.ArchiveChain{
			{ObjectMeta: metav1.ObjectMeta{Namespace: "billing", Name: archivev1alpha1.ChainName},
				Status: archivev1alpha1.ArchiveChainStatus{Verified: true, Complete: true, Full: true, Records: 2, Checkpoints: 1,
					Head: archivev1alpha1.ChainLink{Sequence: 2, Hash: "9f\x1b[31m0a"}}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "shop\x1b[2J", Name: archivev1alpha1.ChainName},
				Status: archivev1alpha1.ArchiveChainStatus{Broken: &archivev1alpha1.ChainBreak{Sequence: 1,
					Key: "order-1\x1b[2J\x1b[H", UID: "4b1d\x1b]0;owned\x07", Problem: "it was changed after it was archived\u202e"}}},
		}},
		archiveAPI + "namespaces/shop/archivechains/ledger": archivev1alpha1.ArchiveChain{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: archivev1alpha1.ChainName},
			Status: archivev1alpha1.ArchiveChainStatus{Verified: true, Complete: true, Records: 3, Head: archivev1alpha1.ChainLink{Sequence: 3, Hash: "c0ffee"},
				CopiedHead: &archivev1alpha1.CopiedHead{ChainLink: archivev1alpha1.ChainLink{Sequence: 2, Hash: "9f\x1b[2J"}, Result: "Matches"}}},
		ledgerAPI + "toolactions":                                  v1alpha1.ToolActionList{},
		archiveAPI + "archivedtoolactions":                         archivev1alpha1.ArchivedToolActionList{Items: []archivev1alpha1.ArchivedToolAction{record}},
		archiveAPI + "namespaces/shop/archivedtoolactions/order-1": record,
		ledgerAPI + "namespaces/shop/tombstones/order-2":           tomb,
		ledgerAPI + "tombstones":                                   v1alpha1.TombstoneList{Items: []v1alpha1.Tombstone{tomb}},
		ledgerAPI + "tools":                                        v1alpha1.ToolList{},
		ledgerAPI + "clustertools":                                 v1alpha1.ClusterToolList{},
	}}
}

// TestArchivedTextIsEscaped: what the archive's database holds reaches the
// auditor's terminal as text, never as escape sequences that act on it,
// through every command that prints an archived record or a verification;
// and so does a tombstone's text.
func TestArchivedTextIsEscaped(t *testing.T) {
	for _, c := range []struct {
		args     []string
		wantCode int
		// wantOut is the whole output of a command whose output does not
		// depend on the time; contain is what the others must show.
		wantOut, wantErr string
		contain          []string
	}{
		{
			args:     []string{"verify", "-A"},
			wantCode: ExitError,
			wantOut: "NAMESPACE     VERIFIED   FROM    RECORDS   PRUNED   BEFORE-CHAIN   CHECKPOINTS   HEAD\n" +
				"billing       true       start   2         0        0              1             2:9f\\x1b[31m0a\n" +
				"shop\\x1b[2J   false      last    0         0        0              0             <empty>\n" +
				"\nshop\\x1b[2J: the chain breaks at record 1 (key order-1\\x1b[2J\\x1b[H, uid 4b1d\\x1b]0;owned\\a): it was changed after it was archived\\u202e\n",
			wantErr: "error: the archived history of namespace shop\\x1b[2J was altered at record 1 (key order-1\\x1b[2J\\x1b[H, uid 4b1d\\x1b]0;owned\\a)\n",
		},
		{
			args:     []string{"verify", "--head", "2:9f"},
			wantCode: ExitOK,
			wantOut: "VERIFIED   FROM   RECORDS   PRUNED   BEFORE-CHAIN   CHECKPOINTS   HEAD\n" +
				"true       last   3         0        0              0             3:c0ffee\n" +
				"\nshop: the copied head 2:9f\\x1b[2J matches: nothing up to it was rewritten\n",
		},
		{
			args:     []string{"history", "-A"},
			wantCode: ExitOK,
			wantOut: "NAMESPACE     KEY                    TOOL            OUTCOME            EXTERNAL-REF   REQUESTED-BY   APPROVER   ATTEMPTS   COMPLETED   WHERE\n" +
				"shop\\x1b[2J   order-1\\x1b[2J\\x1b[H   charge\\x1b[5m   Succeeded\\x1b[1A   <none>         alice\\x1b[8m   bob\\a      1          -           archive\n",
		},
		{
			args:     []string{"status", "order-1"},
			wantCode: ExitOK,
			contain: []string{`order-1\x1b[2J\x1b[H`, `shop\x1b[2J`, `charge\x1b[5m`, `Succeeded\x1b[1A`, `alice\x1b[8m (verified`, `agent\u202etxt`,
				`Approved by bob\a`, `shop/order-1\x1b[K`, `sha256:\x1b[31mabc`, `executor executor\x1b[0m`, `refund\x1b[7m`,
				`Succeeded\x1b[2K   True\x1b[3J`, `Executing\x1b[6n → Succeeded\x1b[?25l`, `by carol\x1b]0;owned\a)`},
		},
		{
			args:     []string{"status", "order-2"},
			wantCode: ExitOK,
			contain:  []string{`Deleted by:          dave\x1b[2J`, `charge\x1b[5m`, `Cause:               Deleted\x1b[1A`},
		},
		{
			args:     []string{"tombstones", "-A"},
			wantCode: ExitOK,
			contain:  []string{`charge\x1b[5m`, `Deleted\x1b[1A`},
		},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			code, stdout, stderr := runAgainst(t, tamperedArchive(t), c.args...)
			if code != c.wantCode {
				t.Errorf("exit %d, want %d; stderr %q", code, c.wantCode, stderr)
			}
			if strings.ContainsAny(stdout+stderr, "\x1b\x07\u202e") {
				t.Errorf("the output holds control characters:\nstdout %q\nstderr %q", stdout, stderr)
			}
			if stderr != c.wantErr {
				t.Errorf("stderr %q, want %q", stderr, c.wantErr)
			}
			if c.contain == nil && stdout != c.wantOut {
				t.Errorf("stdout:\n%s\nwant:\n%s", stdout, c.wantOut)
			}
			for _, want := range c.contain {
				if !strings.Contains(stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout)
				}
			}
		})
	}
}
