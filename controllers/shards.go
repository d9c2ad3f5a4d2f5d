package controllers

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// MemberLabel marks the coordination.k8s.io Leases by which managers say
// they are alive and share the work; its value is "true".
const MemberLabel = "toolledger.dev/member"

// Shards splits the active actions among the live managers, so that one
// manager, not all of them, writes each action's transitions and claims it:
// with N replicas racing for every action, N-1 of every claim are writes
// the API server refuses.
//
// Each manager holds a Lease of its own in the operator namespace, labelled
// MemberLabel and renewed every Renew; a Lease not renewed for its duration
// is a member gone. An action belongs to the live member that ranks first
// for its key under rendezvous hashing, so a member joining or leaving moves
// only the keys it gains or held. Each manager lists the Leases every Renew
// and, when the live set changes, has the actions it now owns reconciled
// (Resync), which hands a dead member's share to the others within its
// Lease's duration.
//
// A split is an optimisation, never the guarantee: two managers with
// different views may both believe they own a key, and the compare-and-set
// claim keeps the dispatch single. A manager that cannot see the Leases owns
// every key, as without sharding.
type Shards struct {
	// Client reads and writes Leases; not cached, so that no informer
	// watches Leases across the cluster.
	Client client.Client
	// Namespace holds the member Leases (the operator namespace).
	Namespace string
	// Identity is this manager's executor ID: the Lease's holder and the
	// name ranked for each key.
	Identity string
	// Duration is how long a Lease lasts without renewal; Renew how often
	// it is renewed and the Leases listed.
	Duration, Renew time.Duration
	// Resync has the actions this manager owns reconciled; called when the
	// live members change.
	Resync func(ctx context.Context, owns func(types.NamespacedName) bool)
	// Now is the clock; time.Now when nil.
	Now func() time.Time

	mu sync.RWMutex
	// members are the live members' identities, sorted; nil owns every key.
	members []string
}

// Owns reports whether this manager handles key's active action.
func (s *Shards) Owns(key types.NamespacedName) bool {
	if s == nil {
		return true
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return owner(s.members, key) == s.Identity || s.members == nil
}

// Members returns the live members as last seen, sorted.
func (s *Shards) Members() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.members)
}

// owner is the member that ranks first for key; "" when there is none.
func owner(members []string, key types.NamespacedName) string {
	best, bestScore := "", uint64(0)
	for _, m := range members {
		if score := rank(m, key); best == "" || score > bestScore {
			best, bestScore = m, score
		}
	}
	return best
}

// rank is member's rendezvous score for key: FNV-1a of both, mixed by
// splitmix64's finaliser so that close names spread evenly.
func rank(member string, key types.NamespacedName) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(member))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(key.Namespace))
	_, _ = h.Write([]byte{'/'})
	_, _ = h.Write([]byte(key.Name))
	x := binary.BigEndian.Uint64(h.Sum(nil))
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// Start holds this manager's Lease until ctx ends, then deletes it so that
// the others take its share at their next listing rather than after its
// duration.
func (s *Shards) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("shards")
	ticker := time.NewTicker(s.Renew)
	defer ticker.Stop()
	for {
		if err := s.renew(ctx); err != nil {
			logger.Error(err, "Cannot renew this manager's member Lease; the others take its share if it lapses")
		}
		if err := s.refresh(ctx); err != nil {
			logger.Error(err, "Cannot list the member Leases; this manager keeps its last view")
		}
		select {
		case <-ctx.Done():
			s.leave()
			return nil
		case <-ticker.C:
		}
	}
}

// NeedLeaderElection is false: every replica holds a share.
func (s *Shards) NeedLeaderElection() bool { return false }

func (s *Shards) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// leaseName is the member Lease's name: the identity, made a valid name.
func (s *Shards) leaseName() string {
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '.':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return '-'
	}, s.Identity)
	name = "toolledger-member-" + name
	if len(name) > 253 {
		name = fmt.Sprintf("%s-%x", name[:236], rank(s.Identity, types.NamespacedName{}))
	}
	return strings.Trim(name, "-.")
}

func (s *Shards) renew(ctx context.Context) error {
	now := metav1.NewMicroTime(s.now())
	var lease coordinationv1.Lease
	err := s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: s.leaseName()}, &lease)
	if apierrors.IsNotFound(err) {
		lease = coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.leaseName(), Labels: map[string]string{MemberLabel: "true"}},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(s.Identity),
				LeaseDurationSeconds: ptr.To(int32(s.Duration / time.Second)),
				AcquireTime:          &now,
				RenewTime:            &now,
			},
		}
		return s.Client.Create(ctx, &lease)
	}
	if err != nil {
		return err
	}
	lease.Spec.RenewTime = &now
	lease.Spec.HolderIdentity = ptr.To(s.Identity)
	lease.Spec.LeaseDurationSeconds = ptr.To(int32(s.Duration / time.Second))
	return s.Client.Update(ctx, &lease)
}

// refresh lists the member Leases and, when the live set changed, resyncs.
func (s *Shards) refresh(ctx context.Context) error {
	var leases coordinationv1.LeaseList
	if err := s.Client.List(ctx, &leases, client.InNamespace(s.Namespace), client.MatchingLabels{MemberLabel: "true"}); err != nil {
		return err
	}
	live := liveMembers(leases.Items, s.now())
	s.mu.Lock()
	changed := !slices.Equal(live, s.members)
	s.members = live
	s.mu.Unlock()
	if changed {
		log.FromContext(ctx).WithName("shards").Info("Live members changed; reconciling the actions this manager now owns", "members", live)
		shardMembers.Set(float64(len(live)))
		if s.Resync != nil {
			s.Resync(ctx, s.Owns)
		}
	}
	return nil
}

// liveMembers are the holders of the Leases renewed within their duration,
// sorted.
func liveMembers(leases []coordinationv1.Lease, now time.Time) []string {
	var live []string
	for _, l := range leases {
		spec := l.Spec
		if spec.HolderIdentity == nil || spec.RenewTime == nil || spec.LeaseDurationSeconds == nil || l.DeletionTimestamp != nil {
			continue
		}
		if now.Before(spec.RenewTime.Add(time.Duration(*spec.LeaseDurationSeconds) * time.Second)) {
			live = append(live, *spec.HolderIdentity)
		}
	}
	slices.Sort(live)
	return slices.Compact(live)
}

// leave deletes this manager's Lease, with a context of its own: the
// manager's has ended.
func (s *Shards) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.leaseName()}}
	if err := client.IgnoreNotFound(s.Client.Delete(ctx, lease)); err != nil {
		log.FromContext(ctx).Error(err, "Cannot delete this manager's member Lease; the others take its share when it lapses")
	}
}
