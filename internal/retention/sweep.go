package retention

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/archive"
	"github.com/toolledger/toolledger/internal/archivebinding"
	"github.com/toolledger/toolledger/internal/chainstate"
	"github.com/toolledger/toolledger/internal/pager"
	"github.com/toolledger/toolledger/internal/requeue"
	"github.com/toolledger/toolledger/internal/shard"
	"github.com/toolledger/toolledger/internal/wake"
)

// Sweep applies the tools' retentions to what no executor has
// scheduled: records finished by a ToolResolution, by a manager that has
// since stopped or before a restart, and tombstones past their key
// retention. It reads pages from the API server and keeps none of them.
// Each replica sweeps the keys it owns (Shards), so replicas share a
// backlog instead of racing through it; a dead replica's keys are swept by
// the others from their next sweep after its Lease lapsed.
type Sweep struct {
	// Client reads Tools and ClusterTools from the cache and deletes
	// Tombstones; Reader lists the finished records from the API server.
	Client client.Client
	Reader client.Reader
	Clock  clock.PassiveClock
	// Shards says which keys this replica sweeps.
	Shards *shard.Members
	// Queue hands a record due to retire to the ToolAction controller.
	Queue *requeue.Queue
	// Pacer spreads the sweep's work beside the controller's.
	Pacer *Pacer
	// Defaults are the retentions of a tool that sets none.
	Defaults Defaults
	// Archive, when set, keeps the finished records and their keys: the
	// Tombstones written before it move into it (when Binding allows,
	// through Mover), its records are pruned HistoryRetention after their
	// keys were freed (zero keeps them), and its chains' heads are
	// checkpointed in Chains every CheckpointEvery.
	Archive          *archive.Store
	Binding          *archivebinding.Guard
	Mover            TombstoneMover
	Chains           *chainstate.Store
	HistoryRetention time.Duration
	CheckpointEvery  time.Duration
	Every            time.Duration

	early wake.Early
}

// Start sweeps at once, then every Every, and when poked.
func (s *Sweep) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("retention-sweep")
	for {
		if err := s.sweep(ctx); err != nil && ctx.Err() == nil {
			logger.Error(err, "Cannot sweep expired ToolActions and Tombstones; retrying", "after", s.Every)
		}
		if !s.early.Sleep(ctx, s.Every) {
			return nil
		}
	}
}

// Poke asks for a sweep now, or right after the one under way: a change of
// shard members may have handed this manager the finished records of one
// that stopped (killed, say, between an archive commit and the delete),
// which the cache of active actions does not hold.
func (s *Sweep) Poke() { s.early.Wake() }

// TombstoneMover moves a Tombstone into the archive, the key kept at every
// moment (keyhistory.Archive); archive.ErrDecommissioned when the archive
// was decommissioned meanwhile.
type TombstoneMover interface {
	MoveTombstone(ctx context.Context, tomb *v1alpha1.Tombstone) error
}

// sweepTarget is one tool with a retention, as the sweep lists it: spec
// with the archive's default retentions, and the tool's own keyRetention.
type sweepTarget struct {
	kind, namespace, name string
	spec                  *v1alpha1.ToolSpec
	ownKeyRetention       *metav1.Duration
}

// sweep visits only the finished actions and tombstones of tools with a
// retention: actions through the selectable fields status.phase and
// spec.toolRef.name, tombstones through their tool labels.
func (s *Sweep) sweep(ctx context.Context) error {
	var tools v1alpha1.ToolList
	if err := s.Client.List(ctx, &tools); err != nil {
		return fmt.Errorf("cannot list Tools: %w", err)
	}
	var clusterTools v1alpha1.ClusterToolList
	if err := s.Client.List(ctx, &clusterTools); err != nil {
		return fmt.Errorf("cannot list ClusterTools: %w", err)
	}
	var targets []sweepTarget
	for i := range tools.Items {
		t := &tools.Items[i]
		targets = append(targets, sweepTarget{kind: v1alpha1.KindTool, namespace: t.Namespace, name: t.Name, spec: s.Defaults.Of(&t.Spec),
			ownKeyRetention: t.Spec.KeyRetention})
	}
	for i := range clusterTools.Items {
		t := &clusterTools.Items[i]
		targets = append(targets, sweepTarget{kind: v1alpha1.KindClusterTool, name: t.Name, spec: s.Defaults.Of(&t.Spec.ToolSpec),
			ownKeyRetention: t.Spec.KeyRetention})
	}
	var errs []error
	// Pruning is a few indexed deletes; it goes first, so that moving a
	// backlog of Tombstones at the retention pace does not hold it up.
	if s.Archive != nil && s.HistoryRetention > 0 {
		errs = append(errs, s.pruneArchive(ctx, targets))
	}
	if s.Archive != nil {
		errs = append(errs, s.checkpointChains(ctx, keyCover(targets)), s.archiveTombstones(ctx))
	}
	for _, target := range targets {
		if Earliest(target.spec) != nil {
			for _, phase := range []v1alpha1.Phase{v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed} {
				errs = append(errs, s.sweepActions(ctx, target, phase))
			}
		}
		if target.spec.KeyRetention != nil && s.Archive == nil {
			errs = append(errs, s.sweepTombstones(ctx, target))
		}
	}
	return errors.Join(errs...)
}

// sweepActions hands the state machine only the actions whose retention has
// passed by the listed tool's figures: it resolves the tool again (for a
// ClusterTool, with a read of the namespace) and must not do so for every record.
func (s *Sweep) sweepActions(ctx context.Context, target sweepTarget, phase v1alpha1.Phase) error {
	tool := &v1alpha1.Tool{Spec: *target.spec}
	selector := fields.AndSelectors(
		fields.OneTermEqualSelector("spec.toolRef.name", target.name),
		fields.OneTermEqualSelector("status.phase", string(phase)),
	)
	opts := []client.ListOption{client.MatchingFieldsSelector{Selector: selector}}
	if target.namespace != "" {
		opts = append(opts, client.InNamespace(target.namespace))
	}
	what := fmt.Sprintf("the %s actions of %s %s", phase, target.kind, target.name)
	actions := func(l *v1alpha1.ToolActionList) []v1alpha1.ToolAction { return l.Items }
	return pager.Each(ctx, s.Reader, what, actions, opts, func(action *v1alpha1.ToolAction) error {
		if action.Spec.ToolRef.Kind != target.kind || !action.DeletionTimestamp.IsZero() ||
			!isDue(action, tool, s.Clock.Now()) || !s.Shards.Owns(client.ObjectKeyFromObject(action)) {
			return nil
		}
		if err := s.waitTurn(ctx, action.UID); err != nil {
			return err
		}
		// Its reconcile takes the turn waited for here, and works from
		// this version: a copy, so that the page is not kept.
		s.Queue.AddListed(action.DeepCopy())
		return nil
	})
}

// isDue reports whether the retention rules have something due for a
// finished action at now.
func isDue(a *v1alpha1.ToolAction, tool *v1alpha1.Tool, now time.Time) bool {
	due, _ := Due(a, tool, now)
	return due != KeepRecord
}

// sweepTombstones deletes the target's tombstones whose key retention has
// passed, at the Pacer's rate.
func (s *Sweep) sweepTombstones(ctx context.Context, target sweepTarget) error {
	tool := &v1alpha1.Tool{Spec: *target.spec}
	opts := []client.ListOption{
		client.MatchingLabelsSelector{Selector: labels.SelectorFromSet(labels.Set{v1alpha1.LabelTool: v1alpha1.ToolLabelValue(target.name), v1alpha1.LabelToolKind: target.kind})},
	}
	if target.namespace != "" {
		opts = append(opts, client.InNamespace(target.namespace))
	}
	expired := func(tomb *v1alpha1.Tombstone) bool {
		return KeyPassed(tomb.Record.CompletionTime.Time, tomb.Record.KeptUntil, tool, s.Clock.Now())
	}
	return s.eachOwnedTombstone(ctx, fmt.Sprintf("of %s %s", target.kind, target.name), opts, expired, func(tomb *v1alpha1.Tombstone) error {
		if s.Pacer.Turn(tomb.UID, time.Now()) > 0 {
			return nil // the clock has not reached the turn (an injected one)
		}
		return Unbury(ctx, s.Client, tomb)
	})
}

// archiveTombstones moves the Tombstones written before the manager had an
// archive into it, at the Pacer's rate: each is archived, then deleted, so
// that the key is kept at every moment. Nothing moves while the ledger's
// binding to the archive is new or another's, nor into a decommissioned
// archive, whose keys go the other way.
func (s *Sweep) archiveTombstones(ctx context.Context) error {
	if err := s.Binding.MayKeep(ctx, time.Now()); err != nil {
		log.FromContext(ctx).V(1).Info("Tombstones stay out of the archive for now", "reason", err.Error())
		return nil
	}
	every := func(*v1alpha1.Tombstone) bool { return true }
	err := s.eachOwnedTombstone(ctx, "to archive", nil, every, func(tomb *v1alpha1.Tombstone) error {
		return s.Mover.MoveTombstone(ctx, tomb)
	})
	if errors.Is(err, archive.ErrDecommissioned) {
		return nil
	}
	if err != nil {
		return err
	}
	return s.recordTombstonesMoved(ctx)
}

// recordTombstonesMoved records in the binding, once no Tombstone is left
// in the cluster, that the key check may read the archive alone. Every
// replica moves its own keys' Tombstones; any one sees the last go.
func (s *Sweep) recordTombstonesMoved(ctx context.Context) error {
	if moved, err := s.Binding.TombstonesMoved(ctx); moved || err != nil {
		return err
	}
	var left metav1.PartialObjectMetadataList
	left.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("TombstoneList"))
	if err := s.Reader.List(ctx, &left, client.Limit(1)); err != nil {
		return fmt.Errorf("cannot list Tombstones: %w", err)
	}
	if len(left.Items) > 0 {
		return nil
	}
	// Decommissioning writes Tombstones: none left then is not the fact.
	if decommissioned, err := s.Archive.Decommissioned(ctx); decommissioned || err != nil {
		return err
	}
	err := archivebinding.RecordTombstonesMoved(ctx, s.Client, s.Binding.Namespace, s.Binding.Archive, time.Now())
	if apierrors.IsConflict(err) {
		return nil // another replica recorded it first, or the binding changed: the next sweep looks again
	}
	if err != nil {
		return err
	}
	log.FromContext(ctx).Info("Every Tombstone is in the archive: key checks read the archive alone until it is decommissioned")
	return nil
}

// eachOwnedTombstone reads the Tombstones opts select from the API server,
// a page at a time, and hands do, each at its turn of the Pacer, those of
// this replica's keys that want accepts; what names them in errors.
func (s *Sweep) eachOwnedTombstone(ctx context.Context, what string, opts []client.ListOption,
	want func(*v1alpha1.Tombstone) bool, do func(*v1alpha1.Tombstone) error) error {
	tombstones := func(l *v1alpha1.TombstoneList) []v1alpha1.Tombstone { return l.Items }
	return pager.Each(ctx, s.Reader, "the Tombstones "+what, tombstones, opts, func(tomb *v1alpha1.Tombstone) error {
		if !want(tomb) || !s.Shards.Owns(client.ObjectKeyFromObject(tomb)) {
			return nil
		}
		if err := s.waitTurn(ctx, tomb.UID); err != nil {
			return err
		}
		return do(tomb)
	})
}

// waitTurn holds the sweep until the Pacer gives uid its turn.
func (s *Sweep) waitTurn(ctx context.Context, uid types.UID) error {
	wait := s.Pacer.Reserve(uid, time.Now())
	if wait <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(wait):
		return nil
	}
}

// Unbury deletes a tombstone whose key retention passed: its key may now
// mean a new intent.
func Unbury(ctx context.Context, c client.Client, tomb *v1alpha1.Tombstone) error {
	err := c.Delete(ctx, tomb, client.Preconditions{UID: &tomb.UID})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("cannot delete the expired Tombstone %s/%s: %w", tomb.Namespace, tomb.Name, err)
	}
	log.FromContext(ctx).V(1).Info("Deleted a tombstone whose key retention passed", "tombstone", client.ObjectKeyFromObject(tomb))
	return nil
}

// pruneArchive deletes the archived records of each tool whose key was
// freed more than HistoryRetention ago, by the tool's keyRetention
// (or the archive's default) as the key check reads it; a record moved from
// a Tombstone by the tool's own; and not before the keptUntil its answers
// stated. Records of a tool that keeps its keys for
// good stay, and so do those of a tool that no longer exists: created
// again, it may keep its keys longer than it did. The records of an
// earlier life of a namespace's name go once the history retention passed
// since they were archived when the namespace now under the name released
// that life, and, when the name is gone or nobody decided, once their keys'
// retention passed too (their keptUntil, else the archive's default key
// retention): a namespace restored from a backup finds them until then.
func (s *Sweep) pruneArchive(ctx context.Context, targets []sweepTarget) error {
	now := s.Clock.Now()
	var cutoffs []archive.Cutoff
	for _, t := range targets {
		if t.spec.KeyRetention == nil {
			continue
		}
		c := archive.Cutoff{Kind: t.kind, Namespace: t.namespace, Name: t.name, Before: now.Add(-t.spec.KeyRetention.Duration - s.HistoryRetention),
			KeptBefore: now.Add(-s.HistoryRetention)}
		if t.ownKeyRetention != nil {
			c.TombstonesBefore = now.Add(-t.ownKeyRetention.Duration - s.HistoryRetention)
		}
		cutoffs = append(cutoffs, c)
	}
	pruned, err := s.Archive.Prune(ctx, cutoffs)
	if err != nil {
		return err
	}
	lifeOf := func(name string, uid types.UID) (archive.Life, error) {
		ns, err := archive.CurrentNamespace(ctx, s.Client, name)
		switch {
		case apierrors.IsNotFound(err):
			return archive.Life{Fate: archive.LifeUnclaimed}, nil
		case err != nil:
			return archive.Life{}, err
		case uid == ns.UID:
			return archive.Life{Current: &ns, Fate: archive.LifeKept}, nil
		}
		var decisions v1alpha1.EarlierLifeDecisionList
		if err := s.Client.List(ctx, &decisions, client.InNamespace(name)); err != nil {
			return archive.Life{}, fmt.Errorf("cannot list the decisions about namespace %s's earlier lives: %w", name, err)
		}
		return archive.Life{Current: &ns, Fate: archive.FateOf(ns, uid, decisions.Items)}, nil
	}
	// An earlier life's keys are kept for the longest key retention of the
	// tools, whichever tool made them: for good when one keeps its keys for
	// good.
	lives := archive.NamespaceCutoffs{Before: now.Add(-s.HistoryRetention), KeptBefore: now.Add(-s.HistoryRetention)}
	if cover := keyCover(targets); cover > 0 && s.Defaults.Key > 0 {
		lives.KeysBefore = now.Add(-max(cover, s.Defaults.Key) - s.HistoryRetention)
	}
	gone, err := s.Archive.PruneNamespaces(ctx, lifeOf, lives)
	if pruned+gone > 0 {
		log.FromContext(ctx).Info("Pruned archived records past their history retention", "records", pruned, "ofEarlierLives", gone)
	}
	return err
}

// checkpointChains has the cluster keep the head of each archived chain
// whose namespace this replica owns, when it moved since the last
// checkpoint and that one is CheckpointEvery old: a rewrite of the
// database, heads included, then shows against it (docs/audit.md). A head
// behind the newest checkpoint, or not on its chain, is refused: the
// archive went back, which the mark watch reports. The checkpoints cover
// cover (the longest key retention; for good when not positive).
func (s *Sweep) checkpointChains(ctx context.Context, cover time.Duration) error {
	heads, err := s.Archive.Heads(ctx)
	if err != nil {
		return err
	}
	now := s.Clock.Now()
	states := map[string]*chainstate.State{}
	latest := map[string]archive.Link{}
	var errs []error
	for namespace := range heads {
		if !s.Shards.Owns(types.NamespacedName{Name: namespace}) {
			continue
		}
		current, err := s.Chains.Read(ctx, namespace)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		states[namespace] = current
		if last := current.Latest(); last != nil {
			latest[namespace] = last.Link()
		}
	}
	holdings, err := s.Archive.Holds(ctx, latest)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for namespace, current := range states {
		head := heads[namespace]
		if behind := holdings[namespace].Behind(namespace, latest[namespace]); latest[namespace].Sequence > 0 && behind != nil {
			errs = append(errs, fmt.Errorf("no checkpoint of namespace %s's chain taken: %w", namespace, behind))
			continue
		}
		if taken, err := chainstate.Checkpoint(current, head, now, s.CheckpointEvery, cover); !taken || err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, s.Chains.Update(ctx, namespace, func(state *chainstate.State) bool {
			// Read again from the API server: refused there as well, it is
			// not taken.
			taken, _ := chainstate.Checkpoint(state, head, now, s.CheckpointEvery, cover)
			return taken
		}))
	}
	return errors.Join(errs...)
}

// keyCover is how long the checkpoints must cover: the longest key
// retention of the targets; 0, for good, when one keeps its keys for good.
func keyCover(targets []sweepTarget) time.Duration {
	var cover time.Duration
	for _, t := range targets {
		if t.spec.KeyRetention == nil {
			return 0
		}
		cover = max(cover, t.spec.KeyRetention.Duration)
	}
	return cover
}
