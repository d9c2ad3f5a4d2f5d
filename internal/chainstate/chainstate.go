// Package chainstate keeps, in the cluster, what proves the archive's hash
// chains from outside their database: each namespace's checkpoints (its
// chain's head, taken every few minutes) and how far a verification of it
// got. A database superuser who rewrites a chain, heads included, cannot
// rewrite these: a verification finds the chain no longer holding a
// checkpoint's hash. And a verification of a long chain goes on, request
// after request, from where the last one stopped.
//
// The state of a namespace's chain is a ConfigMap of the operator's
// namespace, written by the managers only.
package chainstate

import (
	"context"
	"encoding/json"
	"fmt"
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

// MaxCheckpoints is how many checkpoints a chain's state keeps, the newest.
const MaxCheckpoints = 64

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
	// first.
	Checkpoints []Point `json:"checkpoints,omitempty"`
	// Verified is where the last complete verification ended: later ones
	// go on from there.
	Verified *Point `json:"verified,omitempty"`
	// Progress is where a verification under way stopped; Full when it
	// started from the first record.
	Progress *Point `json:"progress,omitempty"`
	Full     bool   `json:"full,omitempty"`
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

// Checkpoint adds head as the newest checkpoint of the chain, when it
// moved since the last one and that one is at least every old; it reports
// whether it did.
func Checkpoint(s *State, head archive.Link, now time.Time, every time.Duration) bool {
	last := s.Latest()
	if head.Sequence == 0 || (last != nil && (last.Sequence == head.Sequence || now.Before(last.Time.Add(every)))) {
		return false
	}
	s.Checkpoints = append(s.Checkpoints, Point{Sequence: head.Sequence, Hash: head.Hash, Time: metav1.NewTime(now.UTC().Truncate(time.Second))})
	if over := len(s.Checkpoints) - MaxCheckpoints; over > 0 {
		s.Checkpoints = append([]Point(nil), s.Checkpoints[over:]...)
	}
	return true
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

// Update changes the state of namespace's chain (chainstate.Update).
func (s *Store) Update(ctx context.Context, namespace string, change func(*State) bool) error {
	return Update(ctx, s.APIReader, s.Client, s.OperatorNamespace, namespace, change)
}
