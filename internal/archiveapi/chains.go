package archiveapi

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	archivev1alpha1 "github.com/toolledger/toolledger/api/archive/v1alpha1"
	"github.com/toolledger/toolledger/internal/archive"
	"github.com/toolledger/toolledger/internal/chainstate"
)

var chainResource = schema.GroupResource{Group: archivev1alpha1.GroupVersion.Group, Resource: archivev1alpha1.ChainResource}

// archiveChains serve ArchiveChains: each namespace's hash chain, verified a step
// per request.
type archiveChains struct{ *Handler }

func (archiveChains) describe() metav1.APIResource {
	return metav1.APIResource{
		Name: archivev1alpha1.ChainResource, SingularName: "archivechain", Namespaced: true,
		Kind: "ArchiveChain", Verbs: metav1.Verbs{"get", "list"},
	}
}

// verifyBudget bounds the time one request spends verifying: a long
// chain is verified over several requests, each well inside the API
// server's bound on a request (60s), going on from where the last stopped.
const verifyBudget = 20 * time.Second

// maxVerifications is how many verifications run at once in a replica.
const maxVerifications = 2

// takeVerification takes a turn to verify for user, waiting readWait at
// most, or answers 429: a caller verifies one chain at a time, and a
// replica maxVerifications, so that no caller holds the others' turns
// longer than one bounded request.
func (h *Handler) takeVerification(w http.ResponseWriter, r *http.Request, user string) (done func(), ok bool) {
	h.verifiersMu.Lock()
	busy := h.verifiers[user]
	if !busy {
		h.verifiers[user] = true
	}
	h.verifiersMu.Unlock()
	if busy {
		writeStatus(w, apierrors.NewTooManyRequests("you are already verifying the archive's history; retry once that request answers", 5))
		return nil, false
	}
	free := func() {
		h.verifiersMu.Lock()
		delete(h.verifiers, user)
		h.verifiersMu.Unlock()
	}
	select {
	case h.verifying <- struct{}{}:
		return func() { <-h.verifying; free() }, true
	case <-time.After(readWait):
	case <-r.Context().Done():
	}
	free()
	writeStatus(w, apierrors.NewTooManyRequests("other verifications of the archive's history are running; retry in a few seconds", 5))
	return nil, false
}

// get verifies the namespace's chain, which is named ledger, a step.
func (h archiveChains) get(w http.ResponseWriter, r *http.Request, user authenticationv1.UserInfo, namespace, name string) {
	if name != archivev1alpha1.ChainName {
		writeStatus(w, apierrors.NewNotFound(chainResource, name))
		return
	}
	copied, err := parseHead(r.URL.Query().Get("head"))
	if err != nil {
		writeStatus(w, apierrors.NewBadRequest(err.Error()))
		return
	}
	done, ok := h.takeVerification(w, r, user.Username)
	if !ok {
		return
	}
	defer done()
	chain, err := h.verifyStep(r.Context(), namespace, copied, r.URL.Query().Get("full") == "true", time.Now().Add(verifyBudget))
	if err != nil {
		writeStatus(w, h.unavailable(err))
		return
	}
	if wantsTable(r) {
		writeJSON(w, chainTable([]archivev1alpha1.ArchiveChain{*chain}, r.URL.Query().Get("includeObject")))
		return
	}
	writeJSON(w, chain)
}

// list verifies the namespace's chain, or every namespace's, a step
// each within one budget: a namespace the budget did not reach is listed
// incomplete, and the next list goes on with it.
func (h archiveChains) list(w http.ResponseWriter, r *http.Request, user authenticationv1.UserInfo, namespace string) {
	if r.URL.Query().Has("head") {
		writeStatus(w, apierrors.NewBadRequest("a copied head is one namespace's: give it with a get of its ArchiveChain, ledger"))
		return
	}
	done, ok := h.takeVerification(w, r, user.Username)
	if !ok {
		return
	}
	defer done()
	namespaces := []string{namespace}
	if namespace == "" {
		var err error
		if namespaces, err = h.records.Namespaces(r.Context()); err != nil {
			writeStatus(w, h.unavailable(err))
			return
		}
	}
	list := &archivev1alpha1.ArchiveChainList{
		TypeMeta: metav1.TypeMeta{APIVersion: archivev1alpha1.GroupVersion.String(), Kind: "ArchiveChainList"},
		Items:    make([]archivev1alpha1.ArchiveChain, 0, len(namespaces)),
	}
	deadline := time.Now().Add(verifyBudget)
	for _, ns := range namespaces {
		chain, err := h.verifyStep(r.Context(), ns, nil, r.URL.Query().Get("full") == "true", deadline)
		if err != nil {
			writeStatus(w, h.unavailable(err))
			return
		}
		list.Items = append(list.Items, *chain)
	}
	if wantsTable(r) {
		writeJSON(w, chainTable(list.Items, r.URL.Query().Get("includeObject")))
		return
	}
	writeJSON(w, list)
}

// verifyStep verifies namespace's chain until deadline, from where the
// cluster's state says (a verification under way, else the last complete
// one's end, else the first record; the first record or a full one under
// way when full), against its checkpoints, and records how far it got.
func (h *Handler) verifyStep(ctx context.Context, namespace string, copied *archive.Link, full bool, deadline time.Time) (*archivev1alpha1.ArchiveChain, error) {
	state, err := h.chains.Read(ctx, namespace)
	if err != nil {
		return nil, err
	}
	from, fromStart := archive.VerifyFrom{Anchors: state.Anchors(), Copied: copied, Budget: max(time.Until(deadline), time.Millisecond)}, true
	switch {
	case state.Progress != nil && (state.Full || !full):
		from.After, fromStart = state.Progress.Link(), state.Full
	case state.Verified != nil && !full:
		from.After, fromStart = state.Verified.Link(), false
	}
	v, err := h.records.Verify(ctx, namespace, from)
	if err != nil {
		return nil, err
	}
	now := metav1.NewTime(time.Now().UTC().Truncate(time.Second))
	reached := &chainstate.Point{Sequence: v.Head.Sequence, Hash: v.Head.Hash, Time: now}
	err = h.chains.Update(ctx, namespace, func(s *chainstate.State) bool {
		switch {
		case v.Broken != nil:
			// Found again from the last complete verification's end.
			s.Progress, s.Full = nil, false
		case v.Complete:
			s.Verified, s.Progress, s.Full = reached, nil, false
		default:
			s.Progress, s.Full = reached, fromStart
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	chain := chainObject(v, now.Time)
	chain.Status.Full = fromStart
	return chain, nil
}

func chainObject(v *archive.Verification, now time.Time) *archivev1alpha1.ArchiveChain {
	chain := &archivev1alpha1.ArchiveChain{
		TypeMeta:   metav1.TypeMeta{APIVersion: archivev1alpha1.GroupVersion.String(), Kind: "ArchiveChain"},
		ObjectMeta: metav1.ObjectMeta{Name: archivev1alpha1.ChainName, Namespace: v.Namespace},
		Status: archivev1alpha1.ArchiveChainStatus{
			Verified: v.Complete && v.Broken == nil, Complete: v.Complete, Head: archivev1alpha1.ChainLink{Sequence: v.Head.Sequence, Hash: v.Head.Hash},
			Length: v.Length, Records: v.Records, Pruned: v.Pruned, Unchained: v.Unchained, Checked: v.Checked, Checkpoints: v.Anchors,
			VerifiedAt: metav1.NewTime(now.UTC().Truncate(time.Second)),
		},
	}
	if b := v.Broken; b != nil {
		chain.Status.Broken = &archivev1alpha1.ChainBreak{Sequence: b.Sequence, Key: b.Key, UID: b.UID, Problem: b.Problem}
	}
	if c := v.Copied; c != nil {
		chain.Status.CopiedHead = &archivev1alpha1.CopiedHead{ChainLink: archivev1alpha1.ChainLink{Sequence: c.Sequence, Hash: c.Hash}, Result: c.Result}
	}
	return chain
}

// parseHead reads a copied head, SEQUENCE:HASH; nil when none is given.
func parseHead(value string) (*archive.Link, error) {
	if value == "" {
		return nil, nil
	}
	sequence, hash, found := strings.Cut(value, ":")
	n, err := strconv.ParseInt(sequence, 10, 64)
	if !found || err != nil || n < 1 || len(hash) != 64 || strings.Trim(hash, "0123456789abcdef") != "" {
		return nil, fmt.Errorf("head %q is not a copied head: give SEQUENCE:HASH, as verify prints it (a sequence from 1, 64 hex digits)", value)
	}
	return &archive.Link{Sequence: n, Hash: hash}, nil
}

var chainColumns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "ledger: a namespace has one chain."},
	{Name: "Verified", Type: "boolean", Description: "Whether the chain holds from its first record to its head."},
	{Name: "Records", Type: "integer", Description: "Records checked."},
	{Name: "Pruned", Type: "integer", Description: "Records pruned by retention, whose links the chain keeps."},
	{Name: "Head", Type: "string", Description: "The newest link: sequence number and hash."},
	{Name: "Broken", Type: "string", Description: "The first record at which the chain does not hold, and why."},
}

func chainTable(items []archivev1alpha1.ArchiveChain, includeObject string) *metav1.Table {
	t := &metav1.Table{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "Table"}, ColumnDefinitions: chainColumns}
	for i := range items {
		c := &items[i]
		broken := ""
		if b := c.Status.Broken; b != nil {
			broken = fmt.Sprintf("record %d: %s", b.Sequence, b.Problem)
		}
		t.Rows = append(t.Rows, metav1.TableRow{Cells: []any{
			c.Name, c.Status.Verified, c.Status.Records, c.Status.Pruned, headText(c.Status.Head), broken,
		}, Object: rowObject(includeObject, c, c.ObjectMeta)})
	}
	return t
}

// headText spells a head as its sequence number and hash: "42:3f2a…".
func headText(head archivev1alpha1.ChainLink) string {
	if head.Sequence == 0 {
		return "<empty>"
	}
	return fmt.Sprintf("%d:%s", head.Sequence, head.Hash)
}
