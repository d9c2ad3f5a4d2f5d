// Package chainstate keeps, in the cluster, what proves the archive's hash
// chains from outside their database: each namespace's mark (the newest
// link whose record left etcd, marks.go), its checkpoints (its chain's
// head, taken every few minutes and kept for the key retention), the
// losses an operator acknowledged, and how far a verification of it got.
// A database restored, failed over to a standby that lagged, or rewritten
// by its superuser cannot roll these back: the managers find the chain no
// longer holding the mark, and a verification finds it no longer holding
// a checkpoint's hash. And a verification of a long chain goes on, request
// after request, from where the last one stopped.
//
// The state of a namespace's chain, and its mark, are ConfigMaps of the
// operator's namespace, written by the managers only.
package chainstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/internal/archive"
)

// LabelNamespace marks a chain's state with the namespace it is of.
const LabelNamespace = "toolledger.dev/archive-chain"

// RecentCheckpoints is how many of the newest checkpoints a chain's state
// keeps whole; of the older ones it keeps the first of each day, for the
// key retention.
const RecentCheckpoints = 32

// MaxCheckpoints bounds the checkpoints a chain's state keeps, whatever
// the key retention: ten years of days.
const MaxCheckpoints = RecentCheckpoints + 3653

// Point is a link of a chain and when it was taken or reached.
type Point struct {
	Sequence int64       `json:"sequence"`
	Hash     string      `json:"hash"`
	Time     metav1.Time `json:"time"`
}

// Link is the point's place in the chain.
func (p Point) Link() archive.Link { return archive.Link{Sequence: p.Sequence, Hash: p.Hash} }

// State is what the cluster keeps of one namespace's chain.
type State struct {
	// Checkpoints are the chain's heads as the managers took them, oldest
	// first, each on the chain of the one before.
	Checkpoints []Point `json:"checkpoints,omitempty"`
	// Losses are the records the archive lost, as operators acknowledged
	// them: the chain goes on from the head the archive held.
	Losses []Loss `json:"losses,omitempty"`
	// Verified is where the last complete verification ended: later ones
	// go on from there.
	Verified *Point `json:"verified,omitempty"`
	// Progress is where a verification under way stopped; Full when it
	// started from the first record.
	Progress *Point `json:"progress,omitempty"`
	Full     bool   `json:"full,omitempty"`
}

// Loss is what an operator acknowledged the archive lost of a chain: the
// records from From to To left etcd for it, and it no longer holds them.
type Loss struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
	// Mark is the cluster's mark the archive did not hold; Head the head it
	// held, from which the chain goes on.
	Mark Point `json:"mark"`
	Head Point `json:"head"`
	// Acknowledgement names the ArchiveAcknowledgement, and AcknowledgedBy
	// the user who created it; Time is when it was applied.
	Acknowledgement string      `json:"acknowledgement"`
	AcknowledgedBy  string      `json:"acknowledgedBy"`
	Time            metav1.Time `json:"time"`
}

// GoOnFrom sets aside what the chain no longer holds past head, the head
// the archive holds once an operator acknowledged its loss: the
// checkpoints onChain refuses, and a verification's progress past it.
func (s *State) GoOnFrom(head archive.Link, onChain func(Point) bool) {
	s.Checkpoints = slices.DeleteFunc(s.Checkpoints, func(c Point) bool { return !onChain(c) })
	if s.Verified != nil && s.Verified.Sequence > head.Sequence {
		s.Verified = nil
	}
	if s.Progress != nil && s.Progress.Sequence > head.Sequence {
		s.Progress, s.Full = nil, false
	}
}

// Anchors are the checkpoints, as a verification checks them.
func (s *State) Anchors() []archive.Anchor {
	anchors := make([]archive.Anchor, 0, len(s.Checkpoints))
	for _, c := range s.Checkpoints {
		anchors = append(anchors, archive.Anchor{Link: c.Link(), Taken: c.Time.Time})
	}
	return anchors
}

// Latest is the newest checkpoint; nil when none was taken.
func (s *State) Latest() *Point {
	if len(s.Checkpoints) == 0 {
		return nil
	}
	return &s.Checkpoints[len(s.Checkpoints)-1]
}

// Key is where the state of namespace's chain is kept.
func Key(operatorNamespace, namespace string) types.NamespacedName {
	return types.NamespacedName{Namespace: operatorNamespace, Name: "toolledger-chain-" + namespace}
}

const dataKey = "state"

// Read reads the state of namespace's chain; an empty one when there is
// none yet.
func Read(ctx context.Context, reader client.Reader, operatorNamespace, namespace string) (*State, error) {
	var cm corev1.ConfigMap
	if err := reader.Get(ctx, Key(operatorNamespace, namespace), &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return &State{}, nil
		}
		return nil, fmt.Errorf("cannot read the checkpoints of namespace %s's chain: %w", namespace, err)
	}
	return decode(&cm)
}

func decode(cm *corev1.ConfigMap) (*State, error) {
	var s State
	if raw := cm.Data[dataKey]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &s); err != nil {
			return nil, fmt.Errorf("ConfigMap %s/%s does not hold a chain's state: %w", cm.Namespace, cm.Name, err)
		}
	}
	return &s, nil
}

// Update applies change to the state of namespace's chain, read with
// reader (the API server), and writes it with c when change reports it
// changed something, again on a conflict with another writer.
func Update(ctx context.Context, reader client.Reader, c client.Client, operatorNamespace, namespace string, change func(*State) bool) error {
	key := Key(operatorNamespace, namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cm corev1.ConfigMap
		err := reader.Get(ctx, key, &cm)
		create := apierrors.IsNotFound(err)
		if err != nil && !create {
			return err
		}
		s, err := decode(&cm)
		if err != nil {
			return err
		}
		if !change(s) {
			return nil
		}
		raw, err := json.Marshal(s)
		if err != nil {
			return err
		}
		if create {
			cm = corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
				Labels: map[string]string{LabelNamespace: namespace, "app.kubernetes.io/part-of": "toolledger"}}}
		}
		cm.Data = map[string]string{dataKey: string(raw)}
		if create {
			err = c.Create(ctx, &cm)
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(corev1.Resource("configmaps"), key.Name, err)
			}
			return err
		}
		return c.Update(ctx, &cm)
	})
	if err != nil {
		return fmt.Errorf("cannot write the state of namespace %s's chain: %w", namespace, err)
	}
	return nil
}

// ErrCheckpointBehind is Checkpoint's answer to a head behind the newest
// checkpoint, or at its sequence with another hash: the archive went back.
var ErrCheckpointBehind = errors.New("the archive's head is behind the chain's newest checkpoint")

// Checkpoint adds head as the newest checkpoint of the chain, when it
// moved since the last one and that one is at least every old; it reports
// whether it did. A head behind the newest checkpoint is refused: a
// checkpoint only moves forward (that the head is on the chain of the
// newest checkpoint, the caller checks with the archive). The newest
// RecentCheckpoints are kept, and of the older ones the first of each day
// for cover (for good when cover is not positive), MaxCheckpoints at most.
func Checkpoint(s *State, head archive.Link, now time.Time, every, cover time.Duration) (bool, error) {
	last := s.Latest()
	switch {
	case last != nil && (head.Sequence < last.Sequence || (head.Sequence == last.Sequence && head.Hash != last.Hash)):
		return false, fmt.Errorf("%w: head %d, newest checkpoint %d of %s", ErrCheckpointBehind, head.Sequence, last.Sequence, last.Time.UTC().Format(time.RFC3339))
	case head.Sequence == 0 || (last != nil && (last.Sequence == head.Sequence || now.Before(last.Time.Add(every)))):
		return false, nil
	}
	s.Checkpoints = compact(append(s.Checkpoints, Point{Sequence: head.Sequence, Hash: head.Hash, Time: metav1.NewTime(now.UTC().Truncate(time.Second))}), now, cover)
	return true, nil
}

// compact keeps the newest RecentCheckpoints of checkpoints, and of the
// older ones the first of each day within cover of now, MaxCheckpoints in
// all.
func compact(checkpoints []Point, now time.Time, cover time.Duration) []Point {
	recent := max(len(checkpoints)-RecentCheckpoints, 0)
	var kept []Point
	for i, c := range checkpoints[:recent] {
		if cover > 0 && c.Time.Add(cover).Before(now) {
			continue
		}
		if i > 0 && sameDay(checkpoints[i-1].Time.Time, c.Time.Time) {
			continue
		}
		kept = append(kept, c)
	}
	kept = append(kept, checkpoints[recent:]...)
	return append([]Point(nil), kept[max(len(kept)-MaxCheckpoints, 0):]...)
}

func sameDay(a, b time.Time) bool {
	ay, am, ad := a.UTC().Date()
	by, bm, bd := b.UTC().Date()
	return ay == by && am == bm && ad == bd
}

// Store reads and writes the chains' states in the operator's namespace.
type Store struct {
	// Reader reads them (the manager's cache); a change reads them from
	// the API server (APIReader) and writes them (Client).
	Reader            client.Reader
	APIReader         client.Reader
	Client            client.Client
	OperatorNamespace string
}

// Read reads the state of namespace's chain.
func (s *Store) Read(ctx context.Context, namespace string) (*State, error) {
	return Read(ctx, s.Reader, s.OperatorNamespace, namespace)
}

// List reads the state of every namespace's chain, by namespace, from the
// API server: what another replica wrote a moment ago included.
func (s *Store) List(ctx context.Context) (map[string]*State, error) {
	var list corev1.ConfigMapList
	if err := s.APIReader.List(ctx, &list, client.InNamespace(s.OperatorNamespace), client.HasLabels{LabelNamespace}); err != nil {
		return nil, fmt.Errorf("cannot list the states of the archive's chains: %w", err)
	}
	states := make(map[string]*State, len(list.Items))
	for i := range list.Items {
		state, err := decode(&list.Items[i])
		if err != nil {
			return nil, err
		}
		states[list.Items[i].Labels[LabelNamespace]] = state
	}
	return states, nil
}

// Update changes the state of namespace's chain (chainstate.Update).
func (s *Store) Update(ctx context.Context, namespace string, change func(*State) bool) error {
	return Update(ctx, s.APIReader, s.Client, s.OperatorNamespace, namespace, change)
}
