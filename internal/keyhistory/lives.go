package keyhistory

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/archive"
)

// +kubebuilder:rbac:groups=toolledger.dev,resources=earlierlifedecisions,verbs=get;list;watch
// +kubebuilder:rbac:groups=toolledger.dev,resources=earlierlifedecisions/status,verbs=update

// A namespace deleted and created again under its name has a new uid: a
// life of its own. What an earlier life left in the archive is that life's
// until a person decides: its owner adopts it (a namespace restored from a
// backup, re-created by GitOps), and its records answer the namespace's
// keys; an administrator releases it (a new tenant given the name), and its
// keys are free for the namespace. Until then the keys it guards are held:
// neither dispatched, which could repeat a restored tenant's effects, nor
// answered, which would show one tenant another's outcomes.

// EarlierLifeError holds a key that an earlier life of its namespace's name
// guards, until a person decides (an EarlierLifeDecision).
type EarlierLifeError struct {
	Namespace, Key string
	// Life is the uid of the earlier life; "" for the records archived
	// before the archive kept namespaces' uids.
	Life types.UID
	// Completed is when that life's record of the key finished.
	Completed time.Time
}

func (e *EarlierLifeError) Error() string {
	life := fmt.Sprintf("uid %s", e.Life)
	if e.Life == "" {
		life = "archived before the archive kept namespaces' uids"
	}
	return fmt.Sprintf("key %s is guarded by an earlier life of namespace %s (%s), whose record of it finished at %s: "+
		"it waits until the namespace's owner adopts that life's history (kubectl toolledger lives adopt -n %s) "+
		"or an administrator releases it (kubectl toolledger lives release -n %s --earlier-life %q)",
		e.Key, e.Namespace, life, e.Completed.UTC().Format(time.RFC3339), e.Namespace, e.Namespace, e.Life)
}

// answering picks the archived record that answers key in the namespace
// ns: the newest, of the current life's and those of the earlier lives it
// adopted, whose key freed does not let go. A released life's record
// answers nothing; an undecided one's holds the key when nothing answers.
func (h Archive) answering(ctx context.Context, ns archive.Namespace, key string, check *archive.KeyCheck, freed func(*archive.Record) bool) (*archive.Record, error) {
	var answer *archive.Record
	if check.Current != nil && !freed(check.Current) {
		answer = check.Current
	}
	if len(check.Earlier) == 0 {
		return answer, nil
	}
	decisions, err := h.decisions(ctx, ns.Name)
	if err != nil {
		return nil, err
	}
	var held *archive.Record
	for _, rec := range check.Earlier {
		if freed(rec) {
			continue
		}
		d := v1alpha1.DecisionFor(decisions, ns.UID, rec.NamespaceUID)
		switch {
		case d == nil:
			if held == nil {
				held = rec
			}
		case d.Spec.Decision == v1alpha1.LifeAdopt && (answer == nil || rec.CompletionTime.After(answer.CompletionTime)):
			answer = rec
		}
	}
	if answer == nil && held != nil {
		return nil, &EarlierLifeError{Namespace: ns.Name, Key: key, Life: held.NamespaceUID, Completed: held.CompletionTime}
	}
	return answer, nil
}

// decisions lists the decisions made in namespace about its earlier lives.
func (h Archive) decisions(ctx context.Context, namespace string) ([]v1alpha1.EarlierLifeDecision, error) {
	var list v1alpha1.EarlierLifeDecisionList
	if err := h.Cache.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("cannot list the decisions about namespace %s's earlier lives: %w", namespace, err)
	}
	return list.Items, nil
}
