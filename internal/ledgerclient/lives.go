package ledgerclient

import (
	"context"
	"fmt"
	"regexp"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

const (
	resourceDecisions        = "earlierlifedecisions"
	resourceAcknowledgements = "archiveacknowledgements"
)

// HeldLife is an earlier life of a namespace's name that holds keys of the
// namespace: the actions waiting, EarlierNamespaceKey, for a decision.
type HeldLife struct {
	// Life is the earlier life's uid; "" for the records archived before
	// the archive kept namespaces' uids.
	Life types.UID `json:"earlierLife"`
	// Keys are the keys of the actions it holds, in order.
	Keys []string `json:"keys"`
}

// heldLife reads the earlier life out of an EarlierNamespaceKey message
// (keyhistory.EarlierLifeError).
var heldLife = regexp.MustCompile(`is guarded by an earlier life of namespace \S+ \((uid (\S+)|archived before the archive kept namespaces' uids)\)`)

// HeldLives lists the earlier lives of namespace's name that hold its
// actions, by life, from the actions waiting for one (EarlierNamespaceKey).
func (l *Ledger) HeldLives(ctx context.Context, namespace string) ([]HeldLife, error) {
	actions, err := l.ListInPhases(ctx, namespace, []v1alpha1.Phase{v1alpha1.PhaseAccepted})
	if err != nil {
		return nil, err
	}
	byLife := map[types.UID][]string{}
	for i := range actions {
		c := meta.FindStatusCondition(actions[i].Status.Conditions, v1alpha1.ConditionReconciling)
		if c == nil || c.Reason != v1alpha1.ReasonEarlierNamespaceKey {
			continue
		}
		if m := heldLife.FindStringSubmatch(c.Message); m != nil {
			byLife[types.UID(m[2])] = append(byLife[types.UID(m[2])], actions[i].Name)
		}
	}
	held := make([]HeldLife, 0, len(byLife))
	for life, keys := range byLife {
		slices.Sort(keys)
		held = append(held, HeldLife{Life: life, Keys: keys})
	}
	slices.SortFunc(held, func(a, b HeldLife) int { return len(b.Keys) - len(a.Keys) })
	return held, nil
}

// ListDecisions lists the decisions made in namespace about its earlier
// lives.
func (l *Ledger) ListDecisions(ctx context.Context, namespace string) ([]v1alpha1.EarlierLifeDecision, error) {
	return listAll(ctx, l, resourceDecisions, namespace, metav1.ListOptions{},
		func(list *v1alpha1.EarlierLifeDecisionList) []v1alpha1.EarlierLifeDecision { return list.Items })
}

// DecideEarlierLife creates a decision about the earlier life earlier of
// namespace, in its life life: the API server sets it when empty (the
// toolledger-earlier-life admission policy), and refuses another.
func (l *Ledger) DecideEarlierLife(ctx context.Context, namespace string, life, earlier types.UID, decision v1alpha1.LifeDecision, reason string) (*v1alpha1.EarlierLifeDecision, error) {
	d := &v1alpha1.EarlierLifeDecision{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "EarlierLifeDecision"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: "earlier-life-"},
		Spec:       v1alpha1.EarlierLifeDecisionSpec{EarlierLife: earlier, Life: life, Decision: decision, Reason: reason},
	}
	created := &v1alpha1.EarlierLifeDecision{}
	if err := l.rest.Post().Namespace(namespace).Resource(resourceDecisions).Body(d).Do(ctx).Into(created); err != nil {
		return nil, fmt.Errorf("cannot create the EarlierLifeDecision (%s earlier life %q of namespace %s): %w", decision, earlier, namespace, err)
	}
	return created, nil
}

// GetDecision reads one EarlierLifeDecision.
func (l *Ledger) GetDecision(ctx context.Context, namespace, name string) (*v1alpha1.EarlierLifeDecision, error) {
	return getObject[v1alpha1.EarlierLifeDecision](ctx, l, resourceDecisions, "EarlierLifeDecision", namespace, name)
}

// ListAcknowledgements lists the ArchiveAcknowledgements, oldest first.
func (l *Ledger) ListAcknowledgements(ctx context.Context) ([]v1alpha1.ArchiveAcknowledgement, error) {
	acks, err := listAll(ctx, l, resourceAcknowledgements, "", metav1.ListOptions{},
		func(list *v1alpha1.ArchiveAcknowledgementList) []v1alpha1.ArchiveAcknowledgement { return list.Items })
	slices.SortFunc(acks, func(a, b v1alpha1.ArchiveAcknowledgement) int {
		return a.CreationTimestamp.Compare(b.CreationTimestamp.Time)
	})
	return acks, err
}

// Acknowledge creates an ArchiveAcknowledgement of the finding the
// managers hold against archive.
func (l *Ledger) Acknowledge(ctx context.Context, archive, finding, reason string) (*v1alpha1.ArchiveAcknowledgement, error) {
	ack := &v1alpha1.ArchiveAcknowledgement{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "ArchiveAcknowledgement"},
		ObjectMeta: metav1.ObjectMeta{GenerateName: "archive-loss-"},
		Spec:       v1alpha1.ArchiveAcknowledgementSpec{Archive: archive, Finding: finding, Reason: reason},
	}
	created := &v1alpha1.ArchiveAcknowledgement{}
	if err := l.rest.Post().Resource(resourceAcknowledgements).Body(ack).Do(ctx).Into(created); err != nil {
		return nil, fmt.Errorf("cannot create the ArchiveAcknowledgement: %w", err)
	}
	return created, nil
}

// GetAcknowledgement reads one ArchiveAcknowledgement.
func (l *Ledger) GetAcknowledgement(ctx context.Context, name string) (*v1alpha1.ArchiveAcknowledgement, error) {
	return getObject[v1alpha1.ArchiveAcknowledgement](ctx, l, resourceAcknowledgements, "ArchiveAcknowledgement", "", name)
}
