package ledgerclient

import (
	"context"
	"errors"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"

	archivev1alpha1 "github.com/toolledger/toolledger/api/archive/v1alpha1"
	"github.com/toolledger/toolledger/api/v1alpha1"
)

// ErrNoArchiveAPI is returned by FindArchived when the cluster serves no
// archive API: the manager runs without an archive, or its APIService is
// not installed.
var ErrNoArchiveAPI = errors.New("the cluster serves no archive API (archive.toolledger.dev): the manager keeps no archive, or its APIService is not installed")

// newArchiveClient is a REST client of the archive API, which the API
// server forwards to the manager and authorizes as cfg's user.
func newArchiveClient(cfg *rest.Config) (*rest.RESTClient, error) {
	scheme := runtime.NewScheme()
	if err := archivev1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("cannot register the archive API: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.APIPath = "/apis"
	cfg.GroupVersion = &archivev1alpha1.GroupVersion
	cfg.ContentType = runtime.ContentTypeJSON
	cfg.AcceptContentTypes = runtime.ContentTypeJSON
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	return rest.RESTClientFor(cfg)
}

// FindArchived reads the newest archived record of a key, read through
// the archive API as the Ledger's user; nil when the archive holds none,
// ErrNoArchiveAPI when there is no archive API.
func (l *Ledger) FindArchived(ctx context.Context, namespace, key string) (*archivev1alpha1.ArchivedToolAction, error) {
	var archived archivev1alpha1.ArchivedToolAction
	err := l.archive.Get().Namespace(namespace).Resource(archivev1alpha1.Resource).Name(key).Do(ctx).Into(&archived)
	switch {
	case err == nil:
		archived.SetGroupVersionKind(archivev1alpha1.GroupVersion.WithKind("ArchivedToolAction"))
		return &archived, nil
	case isNoArchiveAPI(err):
		return nil, ErrNoArchiveAPI
	case apierrors.IsNotFound(err):
		return nil, nil
	default:
		return nil, describeGetError(err, "ArchivedToolAction", namespace, key)
	}
}

// ActionOf is the ToolAction an archived record keeps, for the views that
// show a record in etcd.
func ActionOf(archived *archivev1alpha1.ArchivedToolAction) *v1alpha1.ToolAction {
	return &v1alpha1.ToolAction{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "ToolAction"},
		ObjectMeta: *archived.ObjectMeta.DeepCopy(), Spec: *archived.Spec.DeepCopy(), Status: *archived.Status.DeepCopy(),
	}
}

// VerifyOptions shape VerifyChains.
type VerifyOptions struct {
	// CopiedHead, SEQUENCE:HASH, is a head copied earlier to check against
	// one namespace's chain; "" for none.
	CopiedHead string
	// Full verifies from each chain's first record, not from where the last
	// complete verification ended.
	Full bool
	// Rounds bounds the requests made while a chain is still incomplete;
	// zero asks until every chain is complete.
	Rounds int
	// Progress is told the chains after each round that left one
	// incomplete.
	Progress func([]archivev1alpha1.ArchiveChain)
}

// VerifyChains asks the archive API to verify the hash chain of namespace's
// history ("" for every namespace that has one) as the Ledger's user. The
// manager verifies a chain for a bounded time per request, going on from
// where the last stopped: VerifyChains asks again while a chain is
// incomplete, as opts allow. ErrNoArchiveAPI when there is no archive API.
func (l *Ledger) VerifyChains(ctx context.Context, namespace string, opts VerifyOptions) ([]archivev1alpha1.ArchiveChain, error) {
	for round := 1; ; round++ {
		chains, err := l.verifyChains(ctx, namespace, opts)
		if err != nil {
			return nil, err
		}
		// Asked again while a chain is incomplete and the round got on with
		// it: a manager of an older version reports no progress.
		incomplete := slices.ContainsFunc(chains, func(c archivev1alpha1.ArchiveChain) bool {
			return !c.Status.Complete && c.Status.Broken == nil && c.Status.Checked > 0
		})
		if !incomplete || round == opts.Rounds {
			return chains, nil
		}
		if opts.Progress != nil {
			opts.Progress(chains)
		}
	}
}

// verifyChains asks for one round of verification.
func (l *Ledger) verifyChains(ctx context.Context, namespace string, opts VerifyOptions) ([]archivev1alpha1.ArchiveChain, error) {
	var (
		list archivev1alpha1.ArchiveChainList
		err  error
	)
	if namespace == "" {
		req := l.archive.Get().Resource(archivev1alpha1.ChainResource)
		if opts.Full {
			req = req.Param("full", "true")
		}
		err = req.Do(ctx).Into(&list)
	} else {
		var chain archivev1alpha1.ArchiveChain
		req := l.archive.Get().Namespace(namespace).Resource(archivev1alpha1.ChainResource).Name(archivev1alpha1.ChainName)
		if opts.CopiedHead != "" {
			req = req.Param("head", opts.CopiedHead)
		}
		if opts.Full {
			req = req.Param("full", "true")
		}
		err = req.Do(ctx).Into(&chain)
		list.Items = append(list.Items, chain)
	}
	switch {
	case err == nil:
		for i := range list.Items {
			list.Items[i].SetGroupVersionKind(archivev1alpha1.GroupVersion.WithKind("ArchiveChain"))
		}
		return list.Items, nil
	case isNoArchiveAPI(err):
		return nil, ErrNoArchiveAPI
	default:
		return nil, fmt.Errorf("cannot verify the archive's chain of %s: %w", Scope(namespace), err)
	}
}

// isNoArchiveAPI reports whether err is the API server's 404 for a group it
// does not serve, which client-go reports as an unexpected response.
func isNoArchiveAPI(err error) bool {
	return apierrors.IsNotFound(err) && apierrors.HasStatusCause(err, metav1.CauseTypeUnexpectedServerResponse)
}
