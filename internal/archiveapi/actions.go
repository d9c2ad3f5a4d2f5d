package archiveapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	archivev1alpha1 "github.com/toolledger/toolledger/api/archive/v1alpha1"
	"github.com/toolledger/toolledger/internal/archive"
	"github.com/toolledger/toolledger/internal/history"
)

var actionResource = schema.GroupResource{Group: archivev1alpha1.GroupVersion.Group, Resource: archivev1alpha1.Resource}

// archivedActions serve ArchivedToolActions: the archive's records, a get by key
// and lists streamed from the database a record at a time.
type archivedActions struct{ *Handler }

func (archivedActions) describe() metav1.APIResource {
	return metav1.APIResource{
		Name: archivev1alpha1.Resource, SingularName: "archivedtoolaction", Namespaced: true,
		Kind: "ArchivedToolAction", Verbs: metav1.Verbs{"get", "list"}, ShortNames: []string{"ata"},
	}
}

func (h archivedActions) get(w http.ResponseWriter, r *http.Request, _ authenticationv1.UserInfo, namespace, name string) {
	if problems := validation.IsDNS1123Subdomain(name); len(problems) > 0 {
		writeStatus(w, apierrors.NewNotFound(actionResource, name))
		return
	}
	// Of the namespace now under the name: one created again under it
	// starts a new history.
	ns, err := archive.CurrentNamespace(r.Context(), h.kube, namespace)
	if apierrors.IsNotFound(err) {
		writeStatus(w, apierrors.NewNotFound(actionResource, name))
		return
	}
	if err != nil {
		writeStatus(w, apierrors.NewInternalError(err))
		return
	}
	record, err := h.records.Read(r.Context(), ns, name)
	switch {
	case err != nil:
		writeStatus(w, h.unavailable(err))
		return
	case record == nil:
		writeStatus(w, apierrors.NewNotFound(actionResource, name))
		return
	}
	object, err := Object(record)
	if err != nil {
		writeStatus(w, apierrors.NewInternalError(err))
		return
	}
	if wantsTable(r) {
		writeJSON(w, table([]archivev1alpha1.ArchivedToolAction{*object}, r.URL.Query().Get("includeObject")))
		return
	}
	writeJSON(w, object)
}

func (h archivedActions) list(w http.ResponseWriter, r *http.Request, _ authenticationv1.UserInfo, namespace string) {
	query := r.URL.Query()
	if v := query.Get("labelSelector"); v != "" {
		writeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("%s cannot select by labelSelector (%q): select by fieldSelector (%s)", actionResource, v, history.SelectableFields())))
		return
	}
	filter, err := history.ParseQuery(query)
	if err != nil {
		writeStatus(w, apierrors.NewBadRequest(err.Error()))
		return
	}
	limit, unpaged := MaxPage, true
	if v := query.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("limit %q is not a count", v)))
			return
		}
		if n > 0 {
			limit, unpaged = min(n, MaxPage), false
		}
	}
	from, err := decodeContinue(query.Get("continue"), namespace, filter)
	if err != nil {
		writeStatus(w, apierrors.NewBadRequest(err.Error()))
		return
	}
	ctx := r.Context()
	// A namespace lists the records of its current life: one created again
	// under the name starts a new history; a cluster-wide list shows all.
	in := archive.Scope{Namespace: namespace}
	if namespace != "" {
		ns, err := archive.CurrentNamespace(ctx, h.kube, namespace)
		switch {
		case apierrors.IsNotFound(err):
			ns = archive.Namespace{Name: namespace, UID: "", Created: time.Now()}
		case err != nil:
			writeStatus(w, apierrors.NewInternalError(err))
			return
		}
		in.Life = &ns
	}
	out := &listWriter{w: w, table: wantsTable(r), includeObject: query.Get("includeObject")}
	var next *archive.Position
	if unpaged {
		// Known before the first byte: past that, no status can be sent.
		var counted int
		counted, err = h.records.Count(ctx, in, filter, MaxUnpaged+1)
		switch {
		case err != nil:
			writeStatus(w, h.unavailable(err))
			return
		case counted > MaxUnpaged:
			writeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("%s holds more than %d records here: list them in pages with a limit (kubectl does, 500 at a time)", actionResource, MaxUnpaged)))
			return
		}
		for more := &from; more != nil && err == nil; {
			more, err = h.page(ctx, out, in, filter, *more, MaxPage)
		}
	} else {
		next, err = h.page(ctx, out, in, filter, from, limit)
	}
	if err != nil {
		if out.started {
			// The items written so far must not read as the whole list.
			h.log.Error(err, "The archive API cannot finish a list it began; the response is cut")
			panic(http.ErrAbortHandler)
		}
		writeStatus(w, h.unavailable(err))
		return
	}
	var token string
	if next != nil {
		token = history.EncodeContinue(filter, *next)
	}
	out.finish(token)
}

// page writes the records after from, up to limit of them or PageBytes of
// their JSON, to out as the database sends them; it returns where the next
// page starts, nil at the end.
func (h archivedActions) page(ctx context.Context, out *listWriter, in archive.Scope, filter history.Filter, from archive.Position, limit int) (*archive.Position, error) {
	var (
		next, last *archive.Position
		n, size    int
		failed     error
	)
	err := h.records.List(ctx, in, filter, from, limit+1, func(record *archive.Record) bool {
		if n == limit {
			next = last
			return false
		}
		item, err := out.encode(record)
		if err != nil {
			failed = err
			return false
		}
		if n > 0 && size+len(item) > PageBytes {
			next = last
			return false
		}
		if failed = out.write(item); failed != nil {
			return false
		}
		position := record.Position()
		n, size, last = n+1, size+len(item), &position
		return true
	})
	return next, errors.Join(err, failed)
}

// decodeContinue is where a list of namespace under filter goes on: a
// token is bound to the filter it was made under, and to its namespace.
func decodeContinue(token, namespace string, filter history.Filter) (archive.Position, error) {
	if token == "" {
		return archive.Position{}, nil
	}
	from, err := history.DecodeContinue[archive.Position](filter, token)
	if err != nil {
		return archive.Position{}, err
	}
	if namespace != "" && from.Namespace != namespace {
		return archive.Position{}, fmt.Errorf("the continue token is for namespace %q, not %q", from.Namespace, namespace)
	}
	return from, nil
}
