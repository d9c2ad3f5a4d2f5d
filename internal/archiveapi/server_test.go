package archiveapi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	archivev1alpha1 "github.com/toolledger/toolledger/api/archive/v1alpha1"
	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/archive"
	"github.com/toolledger/toolledger/internal/chainstate"
	"github.com/toolledger/toolledger/internal/history"
)

// records is an archive of a few records in memory: the handler's paging
// and answers are the point here; internal/archive's tests hold the SQL
// against a real PostgreSQL.
type records struct {
	rows   []archive.Record
	chains []archive.Verification
	err    error
	// in and filter are the last list's; copied the last verification's.
	in     archive.Scope
	filter history.Filter
	copied *archive.Link
	from   archive.VerifyFrom
	// block, when set, holds every list until it is closed: a slow reader.
	block chan struct{}
	// listsBeforeErr is how many lists answer before every list fails
	// with err; 0 fails them all.
	listsBeforeErr int
	// mu guards what the calls write: the handler serves readers at once.
	mu sync.Mutex
}

func (f *records) Verify(_ context.Context, namespace string, from archive.VerifyFrom) (*archive.Verification, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.copied, f.from = from.Copied, from
	for i := range f.chains {
		if f.chains[i].Namespace == namespace {
			return &f.chains[i], f.err
		}
	}
	return &archive.Verification{Namespace: namespace}, f.err
}

func (f *records) Namespaces(context.Context) ([]string, error) {
	var namespaces []string
	for _, c := range f.chains {
		namespaces = append(namespaces, c.Namespace)
	}
	return namespaces, f.err
}

// Read answers with the newest record that guards the key, else the newest.
func (f *records) Read(_ context.Context, namespace archive.Namespace, key string) (*archive.Record, error) {
	if r, err := f.find(namespace.Name, key, true); r != nil || err != nil {
		return r, err
	}
	return f.find(namespace.Name, key, false)
}

func (f *records) find(namespace, key string, guarding bool) (*archive.Record, error) {
	var found *archive.Record
	for i := range f.rows {
		r := &f.rows[i]
		if r.Namespace == namespace && r.Key == key && (r.GuardsKey || !guarding) && (found == nil || r.CompletionTime.After(found.CompletionTime)) {
			found = r
		}
	}
	return found, f.err
}

func (f *records) List(_ context.Context, in archive.Scope, filter history.Filter, from archive.Position, limit int, each func(*archive.Record) bool) error {
	f.mu.Lock()
	f.in, f.filter = in, filter
	f.mu.Unlock()
	if f.block != nil {
		<-f.block
	}
	f.mu.Lock()
	fail := f.listsBeforeErr == 0 && f.err != nil
	if f.listsBeforeErr > 0 {
		f.listsBeforeErr--
	}
	f.mu.Unlock()
	if fail {
		return f.err
	}
	for _, r := range f.matching(in.Namespace, from) {
		if limit == 0 || !each(&r) {
			break
		}
		limit--
	}
	return nil
}

func (f *records) Count(_ context.Context, in archive.Scope, _ history.Filter, atMost int) (int, error) {
	f.mu.Lock()
	fail := f.listsBeforeErr == 0 && f.err != nil
	f.mu.Unlock()
	if fail {
		return 0, f.err
	}
	return min(len(f.matching(in.Namespace, archive.Position{})), atMost), nil
}

func (f *records) matching(namespace string, from archive.Position) []archive.Record {
	var out []archive.Record
	for _, r := range f.rows {
		if (namespace == "" || r.Namespace == namespace) && (from.Key == "" || r.Key > from.Key) {
			out = append(out, r)
		}
	}
	return out
}

func row(key string, attempts int32, completed time.Time) archive.Record {
	action, _ := json.Marshal(v1alpha1.ToolAction{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: key, UID: types.UID(key + "-" + fmt.Sprint(attempts))}})
	return archive.Record{UID: types.UID(key + "-" + fmt.Sprint(attempts)), Namespace: "shop", Key: key, Attempts: attempts,
		GuardsKey: attempts > 0, CompletionTime: completed, Cause: v1alpha1.TombstoneCauseRecordRetention, Action: action}
}

// proxy is the API server's front proxy: a client certificate of the CA
// the handler trusts.
type proxy struct {
	leaf *x509.Certificate
	key  *ecdsa.PrivateKey
	ca   []byte
}

func newProxy(t *testing.T) proxy {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "front-proxy-ca"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "front-proxy-client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := x509.ParseCertificate(leafDER)
	if err != nil {
		t.Fatal(err)
	}
	return proxy{leaf: parsed, key: key, ca: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})}
}

// frontProxyConfig is the API server's front-proxy configuration, trusting
// the CA ca.
func frontProxyConfig(ca []byte) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: AuthenticationConfigMap.Namespace, Name: AuthenticationConfigMap.Name},
		Data: map[string]string{
			"requestheader-client-ca-file":   string(ca),
			"requestheader-allowed-names":    `["front-proxy-client"]`,
			"requestheader-username-headers": `["X-Remote-User"]`,
			"requestheader-group-headers":    `["X-Remote-Group"]`,
		},
	}
}

// handler serves rows to users the proxy names, and allows them what
// allowed says.
func handler(t *testing.T, p proxy, f *records, allowed func(*authorizationv1.SubjectAccessReview) bool) *Handler {
	t.Helper()
	return handlerOf(t, fakeKube(p, allowed), f)
}

// fakeKube is an API server that holds the front-proxy configuration
// trusting p's CA and the namespaces shop and other, and answers each
// SubjectAccessReview as allowed says.
func fakeKube(p proxy, allowed func(*authorizationv1.SubjectAccessReview) bool) client.WithWatch {
	namespaces := []client.Object{}
	for _, name := range []string{"shop", "other"} {
		namespaces = append(namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name + "-uid")}})
	}
	return fake.NewClientBuilder().WithObjects(append(namespaces, frontProxyConfig(p.ca))...).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			review, ok := obj.(*authorizationv1.SubjectAccessReview)
			if !ok {
				return c.Create(ctx, obj, opts...)
			}
			review.Status.Allowed = allowed(review)
			return nil
		},
	}).Build()
}

// handlerOf serves rows with the front-proxy configuration kube holds,
// read once.
func handlerOf(t *testing.T, kube client.WithWatch, f *records) *Handler {
	t.Helper()
	authn := NewAuthenticator(kube)
	if err := authn.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	return NewHandler(f, &chainstate.Store{Reader: kube, APIReader: kube, Client: kube, OperatorNamespace: "toolledger-system"}, authn, kube, logr.Discard())
}

// get asks h for path as user, through the proxy when p is set.
func get(h http.Handler, p *proxy, user, path string) (*httptest.ResponseRecorder, metav1.Status) {
	req := httptest.NewRequestWithContext(context.Background(), http.MethodGet, path, nil)
	req.TLS = &tls.ConnectionState{}
	if p != nil {
		req.TLS.PeerCertificates = []*x509.Certificate{p.leaf}
		req.TLS.VerifiedChains = [][]*x509.Certificate{{p.leaf}}
	}
	req.Header.Set("X-Remote-User", user)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var status metav1.Status
	_ = json.Unmarshal(rec.Body.Bytes(), &status)
	return rec, status
}

const shop = "/apis/archive.toolledger.dev/v1alpha1/namespaces/shop/archivedtoolactions"

func allowAll(*authorizationv1.SubjectAccessReview) bool { return true }

func TestAGetAnswersWithTheRecordThatGuardsTheKey(t *testing.T) {
	p := newProxy(t)
	t0 := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	// The key was dispatched once, then applied again and answered from
	// the archive: the newer record guards nothing.
	h := handler(t, p, &records{rows: []archive.Record{row("order-1", 1, t0), row("order-1", 0, t0.Add(time.Hour))}}, allowAll)
	rec, _ := get(h, &p, "alice", shop+"/order-1")
	var got archivev1alpha1.ArchivedToolAction
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("get: %d %s", rec.Code, rec.Body)
	}
	if got.UID != "order-1-1" || !got.Archive.GuardsKey {
		t.Errorf("get answered with %s (guardsKey %v), want the dispatched record order-1-1", got.UID, got.Archive.GuardsKey)
	}
}

func TestAListWithoutALimitIsWholeOrRefused(t *testing.T) {
	p := newProxy(t)
	f := &records{}
	for i := range MaxUnpaged + 1 {
		f.rows = append(f.rows, row(fmt.Sprintf("order-%06d", i), 1, time.Now()))
	}
	h := handler(t, p, f, allowAll)
	rec, status := get(h, &p, "alice", shop)
	if rec.Code != http.StatusBadRequest || status.Message != fmt.Sprintf("archivedtoolactions.archive.toolledger.dev holds more than %d records here: list them in pages with a limit (kubectl does, 500 at a time)", MaxUnpaged) {
		t.Errorf("a list of %d records without a limit: %d %q, want 400 with the reason", len(f.rows), rec.Code, status.Message)
	}
	f.rows = f.rows[:MaxUnpaged]
	rec, _ = get(h, &p, "alice", shop)
	var list archivev1alpha1.ArchivedToolActionList
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil || len(list.Items) != MaxUnpaged || list.Continue != "" {
		t.Errorf("a list of %d records without a limit: %d items, continue %q, want them all", MaxUnpaged, len(list.Items), list.Continue)
	}
	rec, _ = get(h, &p, "alice", shop+"?limit=2")
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil || len(list.Items) != 2 || list.Continue == "" {
		t.Fatalf("limit=2: %d items, continue %q", len(list.Items), list.Continue)
	}
	other := "/apis/archive.toolledger.dev/v1alpha1/namespaces/other/archivedtoolactions?limit=2&continue=" + list.Continue
	if rec, status = get(h, &p, "alice", other); rec.Code != http.StatusBadRequest || status.Message != `the continue token is for namespace "shop", not "other"` {
		t.Errorf("another namespace's continue token: %d %q", rec.Code, status.Message)
	}
}

// A continue token goes on with the list it was made for: the same filter,
// however spelled; under another it would skip or repeat records, and is
// refused.
func TestAContinueTokenIsBoundToItsFilter(t *testing.T) {
	p := newProxy(t)
	f := &records{}
	for i := range 5 {
		f.rows = append(f.rows, row(fmt.Sprintf("order-%d", i), 1, time.Now()))
	}
	h := handler(t, p, f, allowAll)
	charges := "?fieldSelector=" + url.QueryEscape("spec.toolRef.name=charge") + "&completedFrom=2026-12-01T00:00:00Z"
	rec, _ := get(h, &p, "alice", shop+charges+"&limit=2")
	var list archivev1alpha1.ArchivedToolActionList
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil || list.Continue == "" {
		t.Fatalf("limit=2: %d %s", rec.Code, rec.Body)
	}
	next := "&limit=2&continue=" + list.Continue
	const refused = "the continue token is for a list with another filter (fieldSelector, completedFrom, completedUntil, keyPrefix): list again from the start"
	for _, c := range []struct {
		name, query string
		code        int
		message     string
	}{
		{"the same filter", charges, http.StatusOK, ""},
		{"the same filter, spelled otherwise", "?fieldSelector=" + url.QueryEscape("spec.toolRef.name==charge") + "&completedFrom=2026-12-01T01:00:00%2B01:00", http.StatusOK, ""},
		{"another tool", "?fieldSelector=" + url.QueryEscape("spec.toolRef.name=refund") + "&completedFrom=2026-12-01T00:00:00Z", http.StatusBadRequest, refused},
		{"a filter more", charges + "&keyPrefix=order-", http.StatusBadRequest, refused},
		{"no filter", "?", http.StatusBadRequest, refused},
	} {
		if rec, status := get(h, &p, "alice", shop+c.query+next); rec.Code != c.code || status.Message != c.message {
			t.Errorf("%s: %d %q, want %d %q", c.name, rec.Code, status.Message, c.code, c.message)
		}
	}
}

func TestTheArchiveAPIAnswersOnlyWhatItMay(t *testing.T) {
	p := newProxy(t)
	f := &records{rows: []archive.Record{row("order-1", 1, time.Now())}}
	onlyShop := func(r *authorizationv1.SubjectAccessReview) bool {
		return r.Spec.User == "alice" && r.Spec.ResourceAttributes.Namespace == "shop"
	}
	h := handler(t, p, f, onlyShop)
	cases := []struct {
		name, user, path string
		proxied          bool
		code             int
		message          string
	}{
		{"no front-proxy certificate, forged user", "system:admin", shop + "/order-1", false, http.StatusUnauthorized,
			"the archive API answers only requests forwarded by the API server (its front-proxy client certificate); use kubectl or a Kubernetes client"},
		{"another tenant", "alice", "/apis/archive.toolledger.dev/v1alpha1/namespaces/other/archivedtoolactions/order-1", true, http.StatusForbidden,
			`archivedtoolactions.archive.toolledger.dev "order-1" is forbidden: User "alice" cannot get resource "archivedtoolactions" in API group "archive.toolledger.dev" in the namespace "other"`},
		{"another user", "mallory", shop, true, http.StatusForbidden,
			`archivedtoolactions.archive.toolledger.dev is forbidden: User "mallory" cannot list resource "archivedtoolactions" in API group "archive.toolledger.dev" in the namespace "shop"`},
		{"a watch", "alice", shop + "?watch=true", true, http.StatusMethodNotAllowed,
			`watch is not supported on resources of kind "archivedtoolactions.archive.toolledger.dev"`},
		{"a label selector", "alice", shop + "?labelSelector=a%3Db", true, http.StatusBadRequest,
			`archivedtoolactions.archive.toolledger.dev cannot select by labelSelector ("a=b"): select by fieldSelector (spec.toolRef.name, status.phase, status.externalRef, metadata.annotations.toolledger.dev/requested-by, status.approval.decidedBy)`},
		{"a field it cannot select by", "alice", shop + "?fieldSelector=metadata.uid%3Dx", true, http.StatusBadRequest,
			`fieldSelector "metadata.uid=x": archived records cannot select by "metadata.uid", only by spec.toolRef.name, status.phase, status.externalRef, metadata.annotations.toolledger.dev/requested-by, status.approval.decidedBy`},
		{"an inequality", "alice", shop + "?fieldSelector=status.phase!%3DFailed", true, http.StatusBadRequest,
			`fieldSelector "status.phase!=Failed": archived records select by equality only (=)`},
		{"a time that is not one", "alice", shop + "?completedFrom=yesterday", true, http.StatusBadRequest,
			`completedFrom "yesterday" is not an RFC 3339 time, such as 2026-12-01T00:00:00Z`},
	}
	for _, c := range cases {
		var via *proxy
		if c.proxied {
			via = &p
		}
		rec, status := get(h, via, c.user, c.path)
		if rec.Code != c.code || status.Message != c.message {
			t.Errorf("%s: %d %q, want %d %q", c.name, rec.Code, status.Message, c.code, c.message)
		}
	}

	f.err = fmt.Errorf("%w: dial tcp 10.1.2.3:5432: password authentication failed for user \"ledger\"", archive.ErrUnavailable)
	rec, status := get(h, &p, "alice", shop+"/order-1")
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "5" ||
		status.Message != "the archive cannot be reached right now; the manager's log says why" {
		t.Errorf("the archive down: %d (Retry-After %q) %q, want 503, Retry-After 5 and no database detail", rec.Code, rec.Header().Get("Retry-After"), status.Message)
	}

	unread := NewHandler(f, nil, NewAuthenticator(fake.NewClientBuilder().Build()), nil, logr.Discard())
	rec, status = get(unread, &p, "alice", shop)
	if rec.Code != http.StatusServiceUnavailable || status.Message != errNotConfigured.Error() {
		t.Errorf("before the front-proxy configuration is read: %d %q, want 503", rec.Code, status.Message)
	}
}

func TestAChainIsVerifiedWhenItIsRead(t *testing.T) {
	p := newProxy(t)
	head := archive.Link{Sequence: 41, Hash: "3f2a"}
	f := &records{chains: []archive.Verification{
		{Namespace: "other", Head: head, Complete: true, Length: 41, Records: 40, Pruned: 1, Checked: 40},
		{Namespace: "shop", Head: archive.Link{Sequence: 16, Hash: "9b1c"}, Records: 16,
			Broken: &archive.Break{Sequence: 17, Problem: "record 17 is missing: deleted, not pruned"}},
	}}
	var reviews []authorizationv1.ResourceAttributes
	h := handler(t, p, f, func(r *authorizationv1.SubjectAccessReview) bool {
		reviews = append(reviews, *r.Spec.ResourceAttributes)
		return true
	})
	chains := "/apis/archive.toolledger.dev/v1alpha1/namespaces/other/archivechains"
	rec, _ := get(h, &p, "auditor", chains+"/ledger")
	var got archivev1alpha1.ArchiveChain
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("get: %d %s", rec.Code, rec.Body)
	}
	want := archivev1alpha1.ArchiveChainStatus{Verified: true, Complete: true, Full: true, Head: archivev1alpha1.ChainLink{Sequence: 41, Hash: "3f2a"},
		Length: 41, Records: 40, Pruned: 1, Checked: 40}
	got.Status.VerifiedAt = metav1.Time{}
	if got.Name != "ledger" || got.Namespace != "other" || got.Kind != "ArchiveChain" || !equalStatus(got.Status, want) {
		t.Errorf("got %s/%s %s %+v, want other/ledger ArchiveChain %+v", got.Namespace, got.Name, got.Kind, got.Status, want)
	}
	if len(reviews) != 1 || reviews[0].Resource != "archivechains" || reviews[0].Verb != "get" || reviews[0].Namespace != "other" || reviews[0].Name != "ledger" {
		t.Errorf("authorized as %+v, want get archivechains other/ledger", reviews)
	}
	if rec, status := get(h, &p, "auditor", chains+"/history"); rec.Code != http.StatusNotFound ||
		status.Message != `archivechains.archive.toolledger.dev "history" not found` {
		t.Errorf("another name: %d %q, want 404", rec.Code, status.Message)
	}
	rec, _ = get(h, &p, "auditor", "/apis/archive.toolledger.dev/v1alpha1/archivechains")
	var list archivev1alpha1.ArchiveChainList
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil || len(list.Items) != 2 {
		t.Fatalf("list every namespace: %d %s", rec.Code, rec.Body)
	}
	if shop := list.Items[1].Status; shop.Verified || shop.Broken == nil || *shop.Broken != (archivev1alpha1.ChainBreak{Sequence: 17, Problem: "record 17 is missing: deleted, not pruned"}) {
		t.Errorf("a broken chain listed as %+v", shop)
	}
	hash := strings.Repeat("3f", 32)
	if rec, _ := get(h, &p, "auditor", chains+"/ledger?head=41:"+hash); rec.Code != http.StatusOK || f.copied == nil || *f.copied != (archive.Link{Sequence: 41, Hash: hash}) {
		t.Errorf("a copied head: %d, verified with %+v", rec.Code, f.copied)
	}
	for _, bad := range []string{"41", "0:" + hash, "x:" + hash, "41:" + hash[:10], "41:" + strings.ToUpper(hash)} {
		if rec, status := get(h, &p, "auditor", chains+"/ledger?head="+url.QueryEscape(bad)); rec.Code != http.StatusBadRequest ||
			status.Message != fmt.Sprintf("head %q is not a copied head: give SEQUENCE:HASH, as verify prints it (a sequence from 1, 64 hex digits)", bad) {
			t.Errorf("head %q: %d %q, want 400", bad, rec.Code, status.Message)
		}
	}
	if rec, status := get(h, &p, "auditor", "/apis/archive.toolledger.dev/v1alpha1/archivechains?head=41:"+hash); rec.Code != http.StatusBadRequest ||
		status.Message != "a copied head is one namespace's: give it with a get of its ArchiveChain, ledger" {
		t.Errorf("a copied head in a list: %d %q, want 400", rec.Code, status.Message)
	}
	// A caller verifies one chain at a time, and a replica a few.
	h.verifiers["auditor"] = true
	rec, status := get(h, &p, "auditor", chains+"/ledger")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "5" ||
		status.Message != "you are already verifying the archive's history; retry once that request answers" {
		t.Errorf("during the caller's own verification: %d (Retry-After %q) %q, want 429", rec.Code, rec.Header().Get("Retry-After"), status.Message)
	}
	delete(h.verifiers, "auditor")
	for range maxVerifications {
		h.verifying <- struct{}{}
	}
	rec, status = get(h, &p, "auditor", chains+"/ledger")
	if rec.Code != http.StatusTooManyRequests || status.Message != "other verifications of the archive's history are running; retry in a few seconds" {
		t.Errorf("during %d other verifications: %d %q, want 429", maxVerifications, rec.Code, status.Message)
	}
	for range maxVerifications {
		<-h.verifying
	}
	if len(h.verifiers) != 0 {
		t.Errorf("callers left verifying: %v", h.verifiers)
	}
}

// A long chain is verified over several gets: each goes on from where the
// last stopped, which the cluster keeps; once one completes, the next goes
// on from its end, checking the cluster's checkpoints, unless a full one is
// asked for.
func TestAChainIsVerifiedOverSeveralGets(t *testing.T) {
	p := newProxy(t)
	f := &records{chains: []archive.Verification{{Namespace: "shop", Head: archive.Link{Sequence: 20, Hash: "a20"}, Length: 50, Records: 20, Checked: 20}}}
	h := handler(t, p, f, allowAll)
	ctx := context.Background()
	if err := h.chains.Update(ctx, "shop", func(s *chainstate.State) bool {
		taken, _ := chainstate.Checkpoint(s, archive.Link{Sequence: 10, Hash: "a10"}, time.Now(), time.Minute, 0)
		return taken
	}); err != nil {
		t.Fatal(err)
	}
	chain := "/apis/archive.toolledger.dev/v1alpha1/namespaces/shop/archivechains/ledger"
	status := func(query string) archivev1alpha1.ArchiveChainStatus {
		t.Helper()
		rec, _ := get(h, &p, "auditor", chain+query)
		var got archivev1alpha1.ArchiveChain
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != http.StatusOK {
			t.Fatalf("get: %d %s", rec.Code, rec.Body)
		}
		return got.Status
	}
	if s := status(""); s.Verified || s.Complete || !s.Full || s.Head.Sequence != 20 || f.from.After != (archive.Link{}) ||
		len(f.from.Anchors) != 1 || f.from.Anchors[0].Link != (archive.Link{Sequence: 10, Hash: "a10"}) || f.from.Budget <= 0 {
		t.Fatalf("first get: %+v, verified from %+v", s, f.from)
	}
	f.chains[0] = archive.Verification{Namespace: "shop", Head: archive.Link{Sequence: 50, Hash: "a50"}, Complete: true, Length: 50, Records: 50, Checked: 30}
	if s := status(""); !s.Verified || !s.Full || f.from.After != (archive.Link{Sequence: 20, Hash: "a20"}) {
		t.Fatalf("second get: %+v, verified from %+v; want the full verification gone on from record 20", s, f.from)
	}
	if s := status(""); !s.Verified || s.Full || f.from.After != (archive.Link{Sequence: 50, Hash: "a50"}) {
		t.Fatalf("third get: %+v, verified from %+v; want an incremental one from the complete one's end", s, f.from)
	}
	if s := status("?full=true"); !s.Full || f.from.After != (archive.Link{}) {
		t.Fatalf("a full get: %+v, verified from %+v; want the first record", s, f.from)
	}
	f.chains[0].Broken = &archive.Break{Sequence: 51, Problem: "record 51 is missing: deleted, not pruned"}
	if s := status(""); s.Verified || s.Broken == nil {
		t.Fatalf("a broken chain: %+v", s)
	}
	state, err := h.chains.Read(ctx, "shop")
	if err != nil || state.Progress != nil || state.Verified == nil || state.Verified.Sequence != 50 {
		t.Fatalf("state after a break: %+v, %v; want no progress kept, the last complete verification at 50", state, err)
	}
}

func equalStatus(a, b archivev1alpha1.ArchiveChainStatus) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func TestAListSelectsByFieldsAndRanges(t *testing.T) {
	p := newProxy(t)
	f := &records{}
	h := handler(t, p, f, allowAll)
	query := "?fieldSelector=" + url.QueryEscape("spec.toolRef.name=charge,status.phase==Succeeded,metadata.annotations.toolledger.dev/requested-by=alice,status.approval.decidedBy=bob,status.externalRef=ch_1") +
		"&completedFrom=2026-12-01T00:00:00Z&completedUntil=2026-12-02T00:00:00Z&keyPrefix=order-"
	if rec, _ := get(h, &p, "alice", shop+query); rec.Code != http.StatusOK {
		t.Fatalf("list: %d %s", rec.Code, rec.Body)
	}
	want := history.Filter{Tool: "charge", Phase: "Succeeded", RequestedBy: "alice", DecidedBy: "bob", ExternalRef: "ch_1",
		CompletedFrom: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), CompletedUntil: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC), KeyPrefix: "order-"}
	if !f.filter.CompletedFrom.Equal(want.CompletedFrom) || !f.filter.CompletedUntil.Equal(want.CompletedUntil) {
		t.Errorf("range %v–%v, want %v–%v", f.filter.CompletedFrom, f.filter.CompletedUntil, want.CompletedFrom, want.CompletedUntil)
	}
	// The namespace's current life, whose records alone its list shows.
	if of := f.in.Life; of == nil || of.Name != "shop" || of.UID != "shop-uid" {
		t.Errorf("listed records of %+v, want those of namespace shop, uid shop-uid", of)
	}
	f.filter.CompletedFrom, f.filter.CompletedUntil, want.CompletedFrom, want.CompletedUntil = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if f.filter != want {
		t.Errorf("filter %+v, want %+v", f.filter, want)
	}
}

// Reads beyond what the manager's memory is set aside for wait a few
// seconds, then are asked to come back (429, Retry-After), rather than
// piling up in memory: every replica would be killed in turn.
func TestReadsBeyondTheirMemoryAreAskedToRetry(t *testing.T) {
	p := newProxy(t)
	f := &records{rows: []archive.Record{row("order-1", 1, time.Now())}, block: make(chan struct{})}
	h := handler(t, p, f, allowAll)
	const readers = 64
	answers := make(chan *httptest.ResponseRecorder, readers)
	for i := range readers {
		go func() {
			rec, _ := get(h, &p, fmt.Sprintf("reader-%d", i), shop)
			answers <- rec
		}()
	}
	select {
	case rec := <-answers:
		if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
			t.Errorf("a list while %d others read: %d (Retry-After %q), want 429 with a Retry-After", readers-1, rec.Code, rec.Header().Get("Retry-After"))
		}
	case <-time.After(15 * time.Second):
		t.Errorf("%d lists at once all held for 15s: nothing bounds the reads", readers)
	}
	close(f.block)
	for range readers - 1 {
		<-answers
	}
}

// Each user has a share of the reads served at once: a user whose share
// is taken by slow reads is asked to come back at once, and another user's
// read is served meanwhile.
func TestEachUserHasAShareOfTheReads(t *testing.T) {
	p := newProxy(t)
	f := &records{rows: []archive.Record{row("order-1", 1, time.Now())}, block: make(chan struct{})}
	h := handler(t, p, f, allowAll)
	held := make(chan *httptest.ResponseRecorder, readsPerUser)
	for range readsPerUser {
		go func() {
			rec, _ := get(h, &p, "alice", shop)
			held <- rec
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.readersMu.Lock()
		n := h.readers["alice"]
		h.readersMu.Unlock()
		if n == readsPerUser {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice's %d slow reads are not all served: %d", readsPerUser, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	rec, _ := get(h, &p, "alice", shop)
	var status metav1.Status
	_ = json.Unmarshal(rec.Body.Bytes(), &status)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" ||
		status.Message != fmt.Sprintf("you have %d reads of the archive API being served, your share; retry once one is answered", readsPerUser) {
		t.Errorf("alice's read beyond her share: %d (Retry-After %q) %q, want 429 at once", rec.Code, rec.Header().Get("Retry-After"), status.Message)
	}
	bob := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		rec, _ := get(h, &p, "bob", shop)
		bob <- rec
	}()
	close(f.block)
	if rec := <-bob; rec.Code != http.StatusOK {
		t.Errorf("bob's read while alice's share is taken: %d, want 200", rec.Code)
	}
	for range readsPerUser {
		if rec := <-held; rec.Code != http.StatusOK {
			t.Errorf("alice's slow read: %d, want 200", rec.Code)
		}
	}
}

// A list that fails before its first item is answered with a Status; one
// that fails once streaming is cut, so that its items never read as the
// whole list.
func TestAListThatFailsIsNeverTakenForWhole(t *testing.T) {
	p := newProxy(t)
	f := &records{err: fmt.Errorf("%w: the server closed the connection", archive.ErrUnavailable)}
	for i := range MaxPage + 100 {
		f.rows = append(f.rows, row(fmt.Sprintf("order-%06d", i), 1, time.Now()))
	}
	h := handler(t, p, f, allowAll)
	if rec, _ := get(h, &p, "alice", shop+"?limit=10"); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("a page whose query fails: %d, want 503", rec.Code)
	}
	f.listsBeforeErr = 1
	aborted := func() (aborted any) {
		defer func() { aborted = recover() }()
		rec, _ := get(h, &p, "alice", shop)
		t.Logf("answered %d with %d bytes", rec.Code, rec.Body.Len())
		return nil
	}()
	if err, _ := aborted.(error); !errors.Is(err, http.ErrAbortHandler) {
		t.Errorf("a list without a limit whose second page fails: not cut (%v)", aborted)
	}
}
