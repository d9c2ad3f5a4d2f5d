package keyhistory

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/archive"
	"github.com/toolledger/toolledger/internal/archivefinding"
	"github.com/toolledger/toolledger/internal/chainstate"
)

// +kubebuilder:rbac:groups=toolledger.dev,resources=archiveacknowledgements,verbs=get;list;watch
// +kubebuilder:rbac:groups=toolledger.dev,resources=archiveacknowledgements/status,verbs=update

// AnnotationAcknowledgedBy is where the API server stamps who created an
// ArchiveAcknowledgement (config/admission/identity_policy.yaml).
const AnnotationAcknowledgedBy = "toolledger.dev/acknowledged-by"

// Acknowledgements applies the operators' ArchiveAcknowledgements: once
// one names the archive and the finding the managers hold against it, each
// namespace's chain goes on from the head the archive holds, the loss
// recorded beside the chain's checkpoints, and the namespaces' new keys are
// checked again. Every replica may apply one; applying it again changes
// nothing.
type Acknowledgements struct {
	Client client.Client
	Store  *archive.Store
	Watch  *Watch
	Marks  *chainstate.Marker
	Chains *chainstate.Store
	// Recheck hands the actions waiting for their key check to the
	// controller again.
	Recheck func(ctx context.Context)
}

// SetupWithManager registers the controller.
func (a *Acknowledgements) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("archiveacknowledgement").For(&v1alpha1.ArchiveAcknowledgement{}).Complete(a)
}

// Reconcile applies one acknowledgement, once.
func (a *Acknowledgements) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var ack v1alpha1.ArchiveAcknowledgement
	if err := a.Client.Get(ctx, req.NamespacedName, &ack); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if meta.FindStatusCondition(ack.Status.Conditions, v1alpha1.ConditionApplied) != nil {
		return ctrl.Result{}, nil
	}
	if ack.Spec.Archive != a.Store.Identity() {
		return ctrl.Result{}, a.refuse(ctx, &ack, v1alpha1.ReasonOtherArchive,
			fmt.Sprintf("the ledger's archive is %s, not %s: nothing applied", a.Store.Identity(), ack.Spec.Archive))
	}
	finding, err := a.Watch.Compare(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	var lost []v1alpha1.LostRecords
	if finding != nil && finding.Digest == ack.Spec.Finding {
		if lost, err = a.apply(ctx, ack.Name, ack.Annotations[AnnotationAcknowledgedBy], finding); err != nil {
			return ctrl.Result{}, err
		}
	} else {
		// Applied already, in part or whole, by another replica or one
		// that stopped midway: every loss is recorded before any mark
		// moves back, and a mark moved back is what changed the finding,
		// so the losses read now are all of them.
		if lost, err = a.complete(ctx, ack.Name); err != nil {
			return ctrl.Result{}, err
		}
		switch {
		case len(lost) == 0 && finding == nil:
			return ctrl.Result{}, a.refuse(ctx, &ack, v1alpha1.ReasonFindingChanged,
				fmt.Sprintf("the archive holds every mark now: finding %s is over, and nothing was applied", ack.Spec.Finding))
		case len(lost) == 0:
			return ctrl.Result{}, a.refuse(ctx, &ack, v1alpha1.ReasonFindingChanged,
				fmt.Sprintf("the managers' finding is %s now, not %s (%s): acknowledge that one, once you have seen it (kubectl toolledger archive status)",
					finding.Digest, ack.Spec.Finding, finding.Summary()))
		}
	}
	now := metav1.NewTime(time.Now().UTC().Truncate(time.Second))
	ack.Status.Lost, ack.Status.AppliedTime = lost, &now
	meta.SetStatusCondition(&ack.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionApplied, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonLossAcknowledged, ObservedGeneration: ack.Generation,
		Message: fmt.Sprintf("the managers serve the archive as it is; it lost %s, whose keys are free again", describeLost(lost))})
	if err := a.Client.Status().Update(ctx, &ack); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: conflictRetry}, nil
		}
		return ctrl.Result{}, fmt.Errorf("cannot record what acknowledgement %s applied: %w", ack.Name, err)
	}
	log.FromContext(ctx).Info("The archive's loss was acknowledged: the managers serve it as it is", "acknowledgedBy", ack.Annotations[AnnotationAcknowledgedBy],
		"lost", describeLost(lost))
	if _, err := a.Watch.Compare(ctx); err != nil {
		return ctrl.Result{}, err
	}
	a.Recheck(ctx)
	return ctrl.Result{}, nil
}

// apply applies the acknowledgement name of finding, acknowledged by by:
// first the loss of every namespace is recorded in its chain's state, the
// checkpoints past the head the archive holds set aside, then each mark
// moves back to that head. It returns what was lost.
func (a *Acknowledgements) apply(ctx context.Context, name, by string, finding *archivefinding.Finding) ([]v1alpha1.LostRecords, error) {
	now := metav1.NewTime(time.Now().UTC().Truncate(time.Second))
	var lost []v1alpha1.LostRecords
	for _, n := range finding.Namespaces {
		head := archive.Link{Sequence: n.HeadSequence, Hash: n.HeadHash}
		onChain, newestHeld, err := a.heldCheckpoints(ctx, n.Namespace, head)
		if err != nil {
			return nil, err
		}
		// Behind, the records past the head are lost; replaced (the archive
		// went back, then kept records again), those past the newest
		// checkpoint it still holds may be.
		from := n.HeadSequence + 1
		if n.HeadSequence >= n.MarkSequence {
			from = newestHeld + 1
		}
		loss := chainstate.Loss{From: from, To: n.MarkSequence,
			Mark: chainstate.Point{Sequence: n.MarkSequence, Hash: n.MarkHash, Time: metav1.NewTime(n.MarkTime)},
			Head: chainstate.Point{Sequence: n.HeadSequence, Hash: n.HeadHash, Time: now}, Acknowledgement: name, AcknowledgedBy: by, Time: now}
		err = a.Chains.Update(ctx, n.Namespace, func(s *chainstate.State) bool {
			for _, l := range s.Losses {
				if l.Acknowledgement == name {
					return false
				}
			}
			s.Losses = append(s.Losses, loss)
			s.GoOnFrom(head, onChain)
			return true
		})
		if err != nil {
			return nil, err
		}
		lost = append(lost, lostRecords(n.Namespace, loss))
	}
	for _, n := range finding.Namespaces {
		if _, err := a.Marks.Reset(ctx, n.Namespace, archive.Link{Sequence: n.MarkSequence, Hash: n.MarkHash},
			archive.Link{Sequence: n.HeadSequence, Hash: n.HeadHash}); err != nil {
			return nil, err
		}
	}
	return compactLost(lost), nil
}

// complete finishes an acknowledgement applied in part: every mark its
// recorded losses name moves back, when it has not yet. It returns what
// was lost; nothing when the acknowledgement was never applied.
func (a *Acknowledgements) complete(ctx context.Context, name string) ([]v1alpha1.LostRecords, error) {
	states, err := a.Chains.List(ctx)
	if err != nil {
		return nil, err
	}
	var lost []v1alpha1.LostRecords
	for ns, s := range states {
		for _, l := range s.Losses {
			if l.Acknowledgement != name {
				continue
			}
			if _, err := a.Marks.Reset(ctx, ns, l.Mark.Link(), l.Head.Link()); err != nil {
				return nil, err
			}
			lost = append(lost, lostRecords(ns, l))
		}
	}
	return compactLost(lost), nil
}

// heldCheckpoints reads which of the namespace's checkpoints up to head
// the archive holds: the chain goes on from them, the others are set aside
// with the loss. It also returns the newest one held.
func (a *Acknowledgements) heldCheckpoints(ctx context.Context, namespace string, head archive.Link) (func(chainstate.Point) bool, int64, error) {
	state, err := a.Chains.Read(ctx, namespace)
	if err != nil {
		return nil, 0, err
	}
	var links []archive.Link
	for _, c := range state.Checkpoints {
		if c.Sequence <= head.Sequence {
			links = append(links, c.Link())
		}
	}
	held, err := a.Store.HeldLinks(ctx, namespace, links)
	if err != nil {
		return nil, 0, err
	}
	var newest int64
	for l, ok := range held {
		if ok && l.Sequence > newest {
			newest = l.Sequence
		}
	}
	return func(p chainstate.Point) bool { return held[p.Link()] }, newest, nil
}

func lostRecords(namespace string, l chainstate.Loss) v1alpha1.LostRecords {
	lost := v1alpha1.LostRecords{Namespace: namespace, FromSequence: l.From, ToSequence: l.To}
	if !l.Mark.Time.IsZero() {
		until := l.Mark.Time
		lost.RetiredBefore = &until
	}
	return lost
}

// compactLost keeps one entry a namespace, in order.
func compactLost(lost []v1alpha1.LostRecords) []v1alpha1.LostRecords {
	seen := map[string]bool{}
	var out []v1alpha1.LostRecords
	for _, l := range lost {
		if !seen[l.Namespace] {
			seen[l.Namespace] = true
			out = append(out, l)
		}
	}
	slices.SortFunc(out, func(a, b v1alpha1.LostRecords) int { return strings.Compare(a.Namespace, b.Namespace) })
	return out
}

func describeLost(lost []v1alpha1.LostRecords) string {
	s := ""
	for i, l := range lost {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("records %d to %d of namespace %s", l.FromSequence, l.ToSequence, l.Namespace)
	}
	if s == "" {
		return "nothing"
	}
	return s
}

// refuse records that the acknowledgement applies to nothing.
func (a *Acknowledgements) refuse(ctx context.Context, ack *v1alpha1.ArchiveAcknowledgement, reason, message string) error {
	meta.SetStatusCondition(&ack.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionApplied, Status: metav1.ConditionFalse,
		Reason: reason, Message: message, ObservedGeneration: ack.Generation})
	if err := a.Client.Status().Update(ctx, ack); err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("cannot record that acknowledgement %s applies to nothing: %w", ack.Name, err)
	}
	return nil
}
