// Package archiveapi serves the archive's records as the aggregated API
// archive.toolledger.dev/v1alpha1 (ArchivedToolAction, and ArchiveChain,
// the verification of a namespace's history; get and list), the
// way metrics-server serves metrics.k8s.io: the API server authenticates
// the caller, authorizes the request with RBAC and forwards it with the
// user in its front-proxy headers; this server checks the front-proxy
// certificate, authorizes the user again with a SubjectAccessReview, and
// answers from PostgreSQL. So `kubectl get archivedtoolactions`, the plugin,
// the web console and the MCP gateway read the archive as their user, and
// no user holds the database's credentials. It is not built on
// k8s.io/apiserver's generic server, whose lists are whole in memory:
// docs/archive.md says why.
package archiveapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/semaphore"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	archivev1alpha1 "github.com/toolledger/toolledger/api/archive/v1alpha1"
	"github.com/toolledger/toolledger/internal/archive"
	"github.com/toolledger/toolledger/internal/chainstate"
	"github.com/toolledger/toolledger/internal/history"
)

// MaxPage is the most records one list response holds; a list asking for
// more is answered in pages of MaxPage with a continue token, as kubectl
// and client-go's pagers follow.
const MaxPage = 500

// PageBytes bounds the JSON of a list response's items: a page ends before
// the item that would pass it (it holds one at least), with a continue
// token. A list without a limit is read from the database in such pages
// and streamed whole.
const PageBytes = 4 << 20

// MaxUnpaged is the most records a list without a limit returns: a client
// that asks for everything expects everything, so a longer list is refused
// with a reason rather than cut short.
const MaxUnpaged = 10000

// A read (a get, a list, a verification) holds one record at a time,
// decoded and encoded beside its row: recordHold of memory at most, for a
// record that was at most etcd's 1.5 MiB object. readMemory bounds what
// the reads being served hold together; a read that cannot have its share
// within readWait is answered 429 with a Retry-After.
const (
	recordHold = 8 << 20
	readMemory = 64 << 20
	readWait   = 5 * time.Second
)

// readsPerUser is each user's share of the reads served at once: a quarter
// of them, so that one tenant's slow reads (a large history, a slow
// database) leave the others room, and its own further reads are asked to
// come back at once rather than queue ahead of everyone else's.
const readsPerUser = readMemory / recordHold / 4

// Records is the archive as the API reads it.
type Records interface {
	Read(ctx context.Context, namespace archive.Namespace, key string) (*archive.Record, error)
	List(ctx context.Context, in archive.Scope, filter history.Filter, from archive.Position, limit int, each func(*archive.Record) bool) error
	Count(ctx context.Context, in archive.Scope, filter history.Filter, atMost int) (int, error)
	Verify(ctx context.Context, namespace string, from archive.VerifyFrom) (*archive.Verification, error)
	Namespaces(ctx context.Context) ([]string, error)
}

// Handler answers the archive API.
type Handler struct {
	records Records
	authn   *Authenticator
	// kube asks the API server SubjectAccessReviews.
	kube client.Client
	log  logr.Logger
	// chains keeps each chain's checkpoints and how far its verification
	// got, in the cluster.
	chains *chainstate.Store
	// verifying holds the verifications running (maxVerifications);
	// verifiers the users running one, one each.
	verifying   chan struct{}
	verifiersMu sync.Mutex
	verifiers   map[string]bool
	// reads holds the memory the reads being served hold (readMemory).
	reads *semaphore.Weighted
	// readers counts each user's reads being served (readsPerUser).
	readersMu sync.Mutex
	readers   map[string]int
	// resources are the API's kinds, in discovery's order.
	resources []resource
}

// NewHandler returns the API's handler: records read with the users
// authn authenticates, authorized by SubjectAccessReviews asked with kube,
// their chains verified against what chains keeps.
func NewHandler(records Records, chains *chainstate.Store, authn *Authenticator, kube client.Client, log logr.Logger) *Handler {
	h := &Handler{records: records, chains: chains, authn: authn, kube: kube, log: log,
		verifying: make(chan struct{}, maxVerifications), verifiers: map[string]bool{}, reads: semaphore.NewWeighted(readMemory), readers: map[string]int{}}
	h.resources = []resource{archivedActions{h}, archiveChains{h}}
	return h
}

// holdRead takes a read's share of readMemory for user, waiting readWait
// at most, or answers 429: reads beyond it would pile up in the manager's
// memory. A user already served readsPerUser reads is answered 429 at
// once: their share is taken, whoever else waits.
func (h *Handler) holdRead(w http.ResponseWriter, r *http.Request, user string) (release func(), ok bool) {
	h.readersMu.Lock()
	if h.readers[user] >= readsPerUser {
		h.readersMu.Unlock()
		writeStatus(w, apierrors.NewTooManyRequests(fmt.Sprintf("you have %d reads of the archive API being served, your share; retry once one is answered", readsPerUser), 1))
		return nil, false
	}
	h.readers[user]++
	h.readersMu.Unlock()
	leave := func() {
		h.readersMu.Lock()
		defer h.readersMu.Unlock()
		if h.readers[user]--; h.readers[user] == 0 {
			delete(h.readers, user)
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), readWait)
	defer cancel()
	if err := h.reads.Acquire(ctx, recordHold); err != nil {
		leave()
		writeStatus(w, apierrors.NewTooManyRequests("the archive API is serving as many reads as its memory allows; retry in a few seconds", 5))
		return nil, false
	}
	return func() { h.reads.Release(recordHold); leave() }, true
}

var (
	groupPath   = "/apis/" + archivev1alpha1.GroupVersion.Group
	versionPath = groupPath + "/" + archivev1alpha1.GroupVersion.Version
)

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/healthz", "/livez", "/readyz":
		_, _ = w.Write([]byte("ok"))
		return
	}
	user, err := h.authn.User(r)
	switch {
	case errors.Is(err, errNotConfigured):
		writeStatus(w, retryLater(err.Error()))
		return
	case err != nil:
		writeStatus(w, apierrors.NewUnauthorized(err.Error()))
		return
	}
	if r.Method != http.MethodGet {
		writeStatus(w, apierrors.NewMethodNotSupported(actionResource, strings.ToLower(r.Method)))
		return
	}
	switch r.URL.Path {
	case "/apis":
		writeJSON(w, &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{apiGroup()}})
		return
	case groupPath:
		group := apiGroup()
		group.TypeMeta = metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}
		writeJSON(w, &group)
		return
	case versionPath:
		writeJSON(w, h.apiResources())
		return
	case "/openapi/v3":
		writeRaw(w, openAPIIndex)
		return
	case openAPIPath:
		writeRaw(w, openAPI)
		return
	}
	res, namespace, name, ok := h.route(strings.TrimPrefix(r.URL.Path, versionPath))
	if !ok || !strings.HasPrefix(r.URL.Path, versionPath+"/") {
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{}, r.URL.Path))
		return
	}
	gr := schema.GroupResource{Group: archivev1alpha1.GroupVersion.Group, Resource: res.describe().Name}
	if r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1" {
		writeStatus(w, apierrors.NewMethodNotSupported(gr, "watch"))
		return
	}
	verb := "list"
	if name != "" {
		verb = "get"
	}
	if err := h.authorize(r.Context(), user, gr, verb, namespace, name); err != nil {
		writeStatus(w, err)
		return
	}
	release, ok := h.holdRead(w, r, user.Username)
	if !ok {
		return
	}
	defer release()
	if name != "" {
		res.get(w, r, user, namespace, name)
	} else {
		res.list(w, r, user, namespace)
	}
}

// A resource is one of the API's kinds: what discovery says of it and its
// two verbs, which ServeHTTP calls once it has authenticated the user and
// authorized the verb.
type resource interface {
	describe() metav1.APIResource
	get(w http.ResponseWriter, r *http.Request, user authenticationv1.UserInfo, namespace, name string)
	list(w http.ResponseWriter, r *http.Request, user authenticationv1.UserInfo, namespace string)
}

// route reads /namespaces/NS/RESOURCE[/NAME] or /RESOURCE (every
// namespace) for one of the API's resources.
func (h *Handler) route(path string) (res resource, namespace, name string, ok bool) {
	find := func(name string) resource {
		for _, res := range h.resources {
			if res.describe().Name == name {
				return res
			}
		}
		return nil
	}
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) == 1:
		res = find(parts[0])
	case len(parts) == 3 && parts[0] == "namespaces":
		res, namespace = find(parts[2]), parts[1]
	case len(parts) == 4 && parts[0] == "namespaces":
		res, namespace, name = find(parts[2]), parts[1], parts[3]
	}
	return res, namespace, name, res != nil
}

// authorize asks the API server whether user may verb the records of
// namespace (name, when one): the API server authorized the request before
// forwarding it, and this holds even for a request that reached the
// server some other way with a front-proxy certificate.
func (h *Handler) authorize(ctx context.Context, user authenticationv1.UserInfo, gr schema.GroupResource, verb, namespace, name string) error {
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: map[string]authorizationv1.ExtraValue{},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: namespace, Verb: verb, Group: gr.Group, Version: archivev1alpha1.GroupVersion.Version,
			Resource: gr.Resource, Name: name,
		},
	}}
	for k, v := range user.Extra {
		review.Spec.Extra[k] = authorizationv1.ExtraValue(v)
	}
	if err := h.kube.Create(ctx, review); err != nil {
		return apierrors.NewInternalError(fmt.Errorf("cannot authorize the request (SubjectAccessReview): %w", err))
	}
	if review.Status.Allowed && !review.Status.Denied {
		return nil
	}
	where := "at the cluster scope"
	if namespace != "" {
		where = fmt.Sprintf("in the namespace %q", namespace)
	}
	reason := fmt.Errorf("User %q cannot %s resource %q in API group %q %s", user.Username, verb, gr.Resource, gr.Group, where)
	return apierrors.NewForbidden(gr, name, reason)
}

// unavailable is the answer when the archive cannot be read: 503 with a
// Retry-After, which clients retry. The database's own error, which may
// name hosts and roles, goes to the manager's log, not to the caller.
func (h *Handler) unavailable(err error) *apierrors.StatusError {
	h.log.Error(err, "The archive API cannot read the archive")
	if !errors.Is(err, archive.ErrUnavailable) {
		return apierrors.NewInternalError(errors.New("the archived record cannot be read; the manager's log says why"))
	}
	return retryLater("the archive cannot be reached right now; the manager's log says why")
}

// retryLater is a 503 that clients retry after a few seconds.
func retryLater(message string) *apierrors.StatusError {
	status := apierrors.NewServiceUnavailable(message)
	status.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: 5}
	return status
}

func apiGroup() metav1.APIGroup {
	version := metav1.GroupVersionForDiscovery{GroupVersion: archivev1alpha1.GroupVersion.String(), Version: archivev1alpha1.GroupVersion.Version}
	return metav1.APIGroup{Name: archivev1alpha1.GroupVersion.Group, Versions: []metav1.GroupVersionForDiscovery{version}, PreferredVersion: version}
}

func (h *Handler) apiResources() *metav1.APIResourceList {
	list := &metav1.APIResourceList{
		TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
		GroupVersion: archivev1alpha1.GroupVersion.String(),
	}
	for _, res := range h.resources {
		list.APIResources = append(list.APIResources, res.describe())
	}
	return list
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func writeRaw(w http.ResponseWriter, encoded []byte) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(encoded)
}

func writeStatus(w http.ResponseWriter, err error) {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		status = apierrors.NewInternalError(err)
	}
	s := status.Status()
	s.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	if s.Details != nil && s.Details.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(s.Details.RetryAfterSeconds)))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(s.Code))
	_ = json.NewEncoder(w).Encode(&s)
}
