package archivebinding

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/archive"
	"github.com/toolledger/toolledger/internal/chainstate"
)

// Report counts what Decommission did.
type Report struct {
	// Written are the Tombstones written for the archive's kept keys;
	// Present the keys a Tombstone kept already; Gone the keys of
	// namespaces that no longer exist, which no tenant can use; Released
	// the keys of earlier lives of a namespace that an administrator
	// released, which its current life does not answer to.
	Written, Present, Gone, Released int
}

// UndecidedError refuses to decommission an archive that holds keys of
// earlier lives of existing namespaces that nobody adopted or released:
// written back as Tombstones of the current namespace they would answer a
// tenant with another's outcomes, and left out they would be lost to a
// namespace restored from a backup.
type UndecidedError struct {
	// Lives name each such life: "shop (uid 1b2…, 3 keys)".
	Lives []string
}

func (e *UndecidedError) Error() string {
	return fmt.Sprintf("the archive keeps keys of earlier lives of namespaces that nobody adopted or released: %s; "+
		"decide about each (kubectl toolledger lives -n NAMESPACE), then decommission: nothing was decommissioned", strings.Join(e.Lives, "; "))
}

// Decommission ends the ledger's use of the archive without losing a key:
// the archive stops keeping records (a manager that retires one meanwhile
// writes its Tombstone instead), every key it guards is written back as a
// Tombstone of the namespace now under its name when that namespace's life
// is the key's, or adopted it, and only then does the binding let managers
// without the archive dispatch; the chains' marks go with it. Keys of an
// earlier life nobody decided about refuse it, before anything changes.
// Interrupted, it may be run again. c writes Tombstones, which only the
// manager's ServiceAccount may (the tombstone guard).
func Decommission(ctx context.Context, store *archive.Store, c client.Client, namespace string) (Report, error) {
	var done Report
	b, err := Read(ctx, c, namespace)
	switch {
	case err != nil:
		return done, err
	case b != nil && b.Archive != store.Identity():
		return done, fmt.Errorf("the ledger is bound to archive %s, not to this database's archive %s: nothing decommissioned", b.Archive, store.Identity())
	}
	lives := &namespaceLives{client: c}
	if err := refuseUndecided(ctx, store, lives); err != nil {
		return done, err
	}
	at, err := store.Decommission(ctx)
	if err != nil {
		return done, err
	}
	err = store.GuardingKeys(ctx, func(records []*archive.Record) error {
		fate, err := lives.fate(ctx, records)
		if err != nil {
			return err
		}
		switch fate.of {
		case lifeGone:
			done.Gone++
			return nil
		case lifeReleased:
			done.Released++
			return nil
		case lifeUndecided:
			return &UndecidedError{Lives: []string{fate.describe()}}
		}
		tomb := v1alpha1.NewTombstone(fate.record.Namespace, fate.record.Key, fate.record.Tombstone())
		err = c.Create(ctx, tomb)
		switch {
		case err == nil:
			done.Written++
		case apierrors.IsAlreadyExists(err):
			done.Present++
		case apierrors.IsNotFound(err), apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
			done.Gone++
		default:
			return fmt.Errorf("cannot write the Tombstone of %s/%s: %w", fate.record.Namespace, fate.record.Key, err)
		}
		return nil
	})
	if err != nil || b == nil {
		return done, err
	}
	if err := release(ctx, c, namespace, store.Identity(), at); err != nil {
		return done, err
	}
	return done, deleteMarks(ctx, c, namespace)
}

// refuseUndecided refuses, before anything changes, an archive that keeps
// keys of earlier lives nobody decided about.
func refuseUndecided(ctx context.Context, store *archive.Store, lives *namespaceLives) error {
	undecided := map[string]int{}
	err := store.GuardingKeys(ctx, func(records []*archive.Record) error {
		fate, err := lives.fate(ctx, records)
		if err == nil && fate.of == lifeUndecided {
			undecided[fate.life()]++
		}
		return err
	})
	if err != nil || len(undecided) == 0 {
		return err
	}
	refused := &UndecidedError{}
	for life, keys := range undecided {
		refused.Lives = append(refused.Lives, fmt.Sprintf("%s, %d keys", life, keys))
	}
	slices.Sort(refused.Lives)
	return refused
}

// deleteMarks deletes the chains' marks: no record leaves etcd for the
// archive any more, and a manager without it must not take them for an
// archive still in use.
func deleteMarks(ctx context.Context, c client.Client, namespace string) error {
	var marks corev1.ConfigMapList
	if err := c.List(ctx, &marks, client.InNamespace(namespace), client.HasLabels{chainstate.LabelMark}); err != nil {
		return fmt.Errorf("cannot list the archived chains' marks: %w", err)
	}
	for i := range marks.Items {
		if err := c.Delete(ctx, &marks.Items[i]); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("cannot delete the archived chain's mark %s: %w", marks.Items[i].Name, err)
		}
	}
	return nil
}

// The fates of a key's archived records in the namespace now under its
// name.
const (
	// lifeKept: a record of the namespace's life, or of an earlier one it
	// adopted, answers the key.
	lifeKept = iota
	// lifeGone: no namespace has the name now.
	lifeGone
	// lifeReleased: only records of earlier lives released for the
	// namespace guard the key.
	lifeReleased
	// lifeUndecided: a record of an earlier life nobody decided about
	// guards the key, and none the namespace's own life kept.
	lifeUndecided
)

// keyFate is what becomes of one key: the record that answers it, or the
// earlier life that holds it.
type keyFate struct {
	of     int
	record *archive.Record
}

func (f keyFate) life() string {
	if f.record.NamespaceUID == "" {
		return f.record.Namespace + " (records archived before the archive kept namespaces' uids)"
	}
	return fmt.Sprintf("%s (earlier life %s)", f.record.Namespace, f.record.NamespaceUID)
}

func (f keyFate) describe() string {
	return fmt.Sprintf("%s, key %s", f.life(), f.record.Key)
}

// namespaceLives reads each namespace's life and its decisions about its
// earlier lives once.
type namespaceLives struct {
	client    client.Client
	current   map[string]*archive.Namespace
	decisions map[string][]v1alpha1.EarlierLifeDecision
}

// fate decides what becomes of a key from the newest record of each life
// that guards it, newest first.
func (l *namespaceLives) fate(ctx context.Context, records []*archive.Record) (keyFate, error) {
	ns, decisions, err := l.read(ctx, records[0].Namespace)
	if err != nil || ns == nil {
		return keyFate{of: lifeGone, record: records[0]}, err
	}
	fate := keyFate{of: lifeReleased, record: records[0]}
	for _, r := range records {
		switch archive.FateOf(*ns, r.LifeIn(*ns), decisions) {
		case archive.LifeKept:
			return keyFate{of: lifeKept, record: r}, nil
		case archive.LifeUnclaimed:
			if fate.of == lifeReleased {
				fate = keyFate{of: lifeUndecided, record: r}
			}
		}
	}
	return fate, nil
}

// read reads the namespace now under name and its decisions; nil when
// there is none.
func (l *namespaceLives) read(ctx context.Context, name string) (*archive.Namespace, []v1alpha1.EarlierLifeDecision, error) {
	if l.current == nil {
		l.current, l.decisions = map[string]*archive.Namespace{}, map[string][]v1alpha1.EarlierLifeDecision{}
	}
	if ns, read := l.current[name]; read {
		return ns, l.decisions[name], nil
	}
	ns, err := archive.CurrentNamespace(ctx, l.client, name)
	if apierrors.IsNotFound(err) {
		l.current[name] = nil
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var list v1alpha1.EarlierLifeDecisionList
	if err := l.client.List(ctx, &list, client.InNamespace(name)); err != nil {
		return nil, nil, fmt.Errorf("cannot list the decisions about namespace %s's earlier lives: %w", name, err)
	}
	l.current[name], l.decisions[name] = &ns, list.Items
	return &ns, list.Items, nil
}
