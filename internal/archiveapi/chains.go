package archiveapi

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	archivev1alpha1 "github.com/toolledger/toolledger/api/archive/v1alpha1"
	"github.com/toolledger/toolledger/internal/archive"
)

var chainResource = schema.GroupResource{Group: archivev1alpha1.GroupVersion.Group, Resource: archivev1alpha1.ChainResource}

// oneVerification takes the turn to verify, or answers 429: the handler
// runs one verification at a time, since each reads a namespace's whole
// history and every viewer of a namespace may ask for one.
func (h *Handler) oneVerification(w http.ResponseWriter) (done func(), ok bool) {
	select {
	case h.verifying <- struct{}{}:
		return func() { <-h.verifying }, true
	default:
		status := apierrors.NewTooManyRequests("another verification of the archive's history is running; retry in a few seconds", 5)
		writeStatus(w, status)
		return nil, false
	}
}

// getChain verifies the namespace's chain, which is named ledger.
func (h *Handler) getChain(w http.ResponseWriter, r *http.Request, namespace, name string) {
	if name != archivev1alpha1.ChainName {
		writeStatus(w, apierrors.NewNotFound(chainResource, name))
		return
	}
	copied, err := parseHead(r.URL.Query().Get("head"))
	if err != nil {
		writeStatus(w, apierrors.NewBadRequest(err.Error()))
		return
	}
	done, ok := h.oneVerification(w)
	if !ok {
		return
	}
	defer done()
	v, err := h.records.Verify(r.Context(), namespace, copied)
	if err != nil {
		writeStatus(w, h.unavailable(err))
		return
	}
	chain := chainObject(v, time.Now())
	if wantsTable(r) {
		writeJSON(w, chainTable([]archivev1alpha1.ArchiveChain{*chain}, r.URL.Query().Get("includeObject")))
		return
	}
	writeJSON(w, chain)
}

// listChains verifies the namespace's chain, or every namespace's.
func (h *Handler) listChains(w http.ResponseWriter, r *http.Request, namespace string) {
	if r.URL.Query().Has("head") {
		writeStatus(w, apierrors.NewBadRequest("a copied head is one namespace's: give it with a get of its ArchiveChain, ledger"))
		return
	}
	done, ok := h.oneVerification(w)
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
	for _, ns := range namespaces {
		v, err := h.records.Verify(r.Context(), ns, nil)
		if err != nil {
			writeStatus(w, h.unavailable(err))
			return
		}
		list.Items = append(list.Items, *chainObject(v, time.Now()))
	}
	if wantsTable(r) {
		writeJSON(w, chainTable(list.Items, r.URL.Query().Get("includeObject")))
		return
	}
	writeJSON(w, list)
}

func chainObject(v *archive.Verification, now time.Time) *archivev1alpha1.ArchiveChain {
	chain := &archivev1alpha1.ArchiveChain{
		TypeMeta:   metav1.TypeMeta{APIVersion: archivev1alpha1.GroupVersion.String(), Kind: "ArchiveChain"},
		ObjectMeta: metav1.ObjectMeta{Name: archivev1alpha1.ChainName, Namespace: v.Namespace},
		Status: archivev1alpha1.ArchiveChainStatus{
			Verified: v.Broken == nil, Head: archivev1alpha1.ChainLink{Sequence: v.Head.Sequence, Hash: v.Head.Hash},
			Records: v.Records, Pruned: v.Pruned, Unchained: v.Unchained, VerifiedAt: metav1.NewTime(now.UTC().Truncate(time.Second)),
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
