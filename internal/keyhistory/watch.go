package keyhistory

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/internal/archive"
	"github.com/toolledger/toolledger/internal/archivebinding"
	"github.com/toolledger/toolledger/internal/archivefinding"
	"github.com/toolledger/toolledger/internal/chainstate"
)

// Watch compares the archive's chains with the cluster's marks, when the
// manager starts and every Every after: an archive that no longer holds a
// namespace's mark (restored from a backup or to a point in time, failed
// over to a standby that lagged, another database) lost records that left
// etcd for it, whose keys nothing else keeps. While it is behind, the
// manager is not ready, says why in its log and its metrics, and records
// the finding in the archive binding for an operator to acknowledge. The
// key checks and the keeps of those namespaces refuse it meanwhile, each
// against its own namespace's mark (archive.ErrBehind).
type Watch struct {
	Store *archive.Store
	// Reader reads the marks (the manager's cache); Client records the
	// finding in the binding.
	Reader            client.Reader
	Client            client.Client
	OperatorNamespace string
	// Executor names this manager in the finding.
	Executor string
	Every    time.Duration
	Log      logr.Logger

	mu sync.Mutex
	// compared is whether a comparison completed; finding is the last
	// one's, nil when the archive held every mark.
	compared bool
	finding  *archivefinding.Finding
}

// NeedLeaderElection is false: every replica checks keys against its
// archive.
func (w *Watch) NeedLeaderElection() bool { return false }

// Start seeds the marks of the chains that have none from their newest
// checkpoints, then compares at once, and every Every.
func (w *Watch) Start(ctx context.Context) error {
	if seeded, err := chainstate.SeedMarks(ctx, w.Reader, w.Client, w.OperatorNamespace); err != nil {
		w.Log.Error(err, "Cannot seed the chains' marks from their checkpoints")
	} else if seeded > 0 {
		w.Log.Info("Seeded the marks of the chains that had none from their newest checkpoints", "chains", seeded)
	}
	for {
		if _, err := w.Compare(ctx); err != nil && ctx.Err() == nil {
			w.Log.Error(err, "Cannot compare the archive's chains with the cluster's marks; retrying", "after", w.Every)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(w.Every):
		}
	}
}

// Compare compares the archive's chains with the cluster's marks now, and
// returns what it found: nil when the archive holds every mark.
func (w *Watch) Compare(ctx context.Context) (*archivefinding.Finding, error) {
	marks, err := chainstate.Marks(ctx, w.Reader, w.OperatorNamespace)
	if err != nil {
		return nil, err
	}
	links := make(map[string]archive.Link, len(marks))
	for ns, p := range marks {
		links[ns] = p.Link()
	}
	holdings, err := w.Store.Holds(ctx, links)
	if err != nil {
		return nil, err
	}
	var behind []archivefinding.BehindNamespace
	for ns, mark := range marks {
		if h := holdings[ns]; !h.Held {
			behind = append(behind, archivefinding.BehindNamespace{Namespace: ns, MarkSequence: mark.Sequence, MarkHash: mark.Hash,
				MarkTime: mark.Time.UTC(), HeadSequence: h.Head.Sequence, HeadHash: h.Head.Hash})
		}
	}
	var finding *archivefinding.Finding
	if len(behind) > 0 {
		finding = archivefinding.New(w.Store.Identity(), behind, time.Now(), w.Executor)
	}
	w.report(finding)
	return finding, w.record(ctx, finding)
}

// report logs a change of finding and sets the gauge.
func (w *Watch) report(finding *archivefinding.Finding) {
	w.mu.Lock()
	last, compared := w.finding, w.compared
	w.finding, w.compared = finding, true
	w.mu.Unlock()
	behindNamespaces.Set(0)
	if finding != nil {
		behindNamespaces.Set(float64(len(finding.Namespaces)))
	}
	switch {
	case finding != nil && (last == nil || last.Digest != finding.Digest):
		w.Log.Error(archive.ErrBehind, "The archive lost records that left etcd: new keys of these namespaces wait, and none of their records is kept, "+
			"until it catches up or an operator acknowledges the loss (kubectl toolledger archive status)",
			"namespaces", finding.Summary(), "finding", finding.Digest)
	case finding == nil && last != nil:
		w.Log.Info("The archive holds every mark again: the namespaces it was behind are served")
	case finding == nil && !compared:
		w.Log.Info("The archive holds the cluster's mark of every chain")
	}
}

// record keeps the finding in the binding, the first that found it named.
// Another replica that wrote the binding meanwhile wrote it, or the next
// comparison does.
func (w *Watch) record(ctx context.Context, finding *archivefinding.Finding) error {
	if finding != nil {
		b, err := archivebinding.Read(ctx, w.Reader, w.OperatorNamespace)
		if err != nil {
			return err
		}
		if b != nil && b.Behind != nil && b.Behind.Digest == finding.Digest {
			return nil
		}
	}
	err := archivebinding.RecordFinding(ctx, w.Client, w.OperatorNamespace, w.Store.Identity(), finding)
	if apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// Finding is the last comparison's finding; nil when the archive held
// every mark.
func (w *Watch) Finding() *archivefinding.Finding {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.finding
}

// Ready is a readiness check: a manager whose archive lost records that
// left etcd is not ready until it holds them again or an operator
// acknowledged the loss, nor before it compared once.
func (w *Watch) Ready(*http.Request) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case !w.compared:
		return fmt.Errorf("the archive's chains are not compared with the cluster's marks yet")
	case w.finding != nil:
		return fmt.Errorf("the archive %s lost records that left etcd, of namespaces %s: acknowledge the loss once what can be restored is (kubectl toolledger archive status)",
			w.finding.Archive, w.finding.Summary())
	}
	return nil
}

var behindNamespaces = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "toolledger_archive_behind_namespaces",
	Help: "Namespaces whose archived chain no longer holds the cluster's mark: the archive lost records that had left etcd (a restore, a failover to a standby that lagged). Their new keys wait (ArchiveBehind) until it catches up or an operator acknowledges the loss (docs/archive.md#when-the-archive-goes-back).",
})

// Metrics are the collectors of a key's history, which the manager
// registers.
func Metrics() []prometheus.Collector { return []prometheus.Collector{behindNamespaces} }
